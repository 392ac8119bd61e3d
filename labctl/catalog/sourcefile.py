"""YAML files read with their line numbers, so that every complaint can name file, field and line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from labctl.errors import BadInput

KeyPath = tuple[str | int, ...]
# libyaml's safe loader when PyYAML has it (several times faster), else the pure-Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class SourceFile:
    """A parsed YAML mapping plus where each key stands in the file."""

    path: Path
    data: dict[str, Any]
    lines: dict[KeyPath, int] = field(default_factory=dict)
    display: str = ""

    @property
    def name(self) -> str:
        return self.display or str(self.path)

    def where(self, key: KeyPath) -> str:
        """`file:line: a.b.c` for a field, falling back to the nearest parent that has a line."""
        for n in range(len(key), -1, -1):
            line = self.lines.get(key[:n])
            if line:
                return f"{self.name}:{line}: {dotted(key)}" if key else f"{self.name}:{line}"
        return f"{self.name}: {dotted(key)}" if key else self.name

    def problem(self, key: KeyPath, text: str) -> BadInput:
        return BadInput(f"{self.where(key)}: {text}")


def dotted(key: KeyPath) -> str:
    out = ""
    for part in key:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_yaml_mapping(path: Path, display: str = "") -> SourceFile:
    name = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{name}: file not found.") from None
    except UnicodeDecodeError:
        raise BadInput(f"{name}: not UTF-8 text.") from None
    return parse_yaml_mapping(text, path, name)


def parse_yaml_mapping(text: str, path: Path, display: str = "") -> SourceFile:
    name = display or str(path)
    if not text.strip():
        raise BadInput(f"{name}: the file is empty; it must be a YAML mapping (see README, 'Profile format').")
    try:
        node = yaml.compose(text, Loader=_LOADER)
        data = yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise BadInput(f"{name}{line}: YAML syntax error: {exc.problem or exc}. Fix the file and try again.") from None
    except yaml.YAMLError as exc:
        raise BadInput(f"{name}: YAML error: {exc}.") from None
    if not isinstance(data, dict) or node is None:
        kind = "empty" if data is None else type(data).__name__
        raise BadInput(f"{name}: expected a YAML mapping of fields at the top level, found {kind}.")
    lines: dict[KeyPath, int] = {}
    _collect_lines(node, (), lines, name)
    return SourceFile(path=path, data=data, lines=lines, display=name)


def _collect_lines(node: yaml.Node, prefix: KeyPath, lines: dict[KeyPath, int], name: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                raise BadInput(
                    f"{name}:{key_node.start_mark.line + 1}: {dotted((*prefix, key))}: duplicate key; keep one."
                )
            seen.add(key)
            lines[(*prefix, key)] = key_node.start_mark.line + 1
            _collect_lines(value_node, (*prefix, key), lines, name)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*prefix, index)] = item.start_mark.line + 1
            _collect_lines(item, (*prefix, index), lines, name)
