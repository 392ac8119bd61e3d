"""The same-rules gate across a study's cells, before any GPU time: every cell serves the model series the
study fixes. A mismatch names the field and the cells."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from labctl.errors import BadInput
from labctl.study.cells import Cell
from labctl.study.spec import Study


def _value(cell: Cell, name: str) -> Any:
    model = cell.profile.model
    if name == "id":
        return model.id
    if name == "revision":
        return model.revision
    if name == "quantization":
        return model.quantization
    if name == "thinking":
        return model.thinking
    return cell.profile.max_model_len


def check_same_rules(study: Study, cells: list[Cell]) -> None:
    """Refuses (exit 2) when a cell's model, revision, quantization, context or thinking mode differs from
    the study's, naming the field and which cells hold which value."""
    fixed = study.model
    for name in ("id", "revision", "quantization", "max_model_len", "thinking"):
        want = fixed.get(name)
        if want is None:
            values = {_value(c, name) for c in cells}
            if len(values) <= 1:
                continue
        by_value: dict[str, list[str]] = defaultdict(list)
        for cell in cells:
            by_value[str(_value(cell, name))].append(cell.key)
        wrong = {v: keys for v, keys in by_value.items() if want is None or v != str(want)}
        if not wrong:
            continue
        held = "; ".join(f"{v}: {', '.join(keys)}" for v, keys in sorted(by_value.items()))
        expected = f"the study fixes model.{name} = {want}" if want is not None else f"model.{name} must be one value"
        raise BadInput(
            f"{study.path}: same rules: model.{name} differs across cells ({held}); {expected}. "
            "Nothing was started: make the profiles serve one model series, or split the study."
        )
