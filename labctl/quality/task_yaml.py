"""A lab's lm-eval task.yaml read as data, never as code. lm-evaluation-harness's own loader imports any
Python a `!function` tag names (from the task folder or anywhere), follows `include:` to any path, looks up
metrics it does not know with `evaluate.load` (which runs a metric script) and renders its Jinja templates
in an unsandboxed environment. A colleague's lab is untrusted input, so labctl reads task.yaml itself:

- `!function` may name only labctl's own checks (CHECKS), bound to labctl's functions: the task folder's
  checks.py is never imported (it exists for people who run the folder with lm-eval directly);
- `include:` names a YAML file beside task.yaml, read by these same rules (four deep at most, no cycles);
- a metric's name is a plain word and `hf_evaluate` is refused, so no metric script is loaded;
- the harness renders templates in a sandboxed Jinja environment (`sandbox_templates`), where a template
  reaches no Python internals.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from labctl.catalog.sourcefile import MAX_BYTES, check_events, read_bounded
from labctl.errors import BadInput
from labctl.quality.lm_eval_checks import code_passes, instructions_followed

# `!function NAME` a task.yaml may use, and the metrics each one reports.
CHECKS: dict[str, tuple[Callable[..., dict[str, float]], frozenset[str]]] = {
    "checks.code_passes": (code_passes, frozenset({"pass"})),
    "checks.instructions_followed": (instructions_followed, frozenset({"all_followed", "share_followed"})),
}
INCLUDE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\.ya?ml")
METRIC = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
MAX_INCLUDE_DEPTH = 4
_PLAIN = "tag:yaml.org,2002:"
_TAGS = {"!function", *(_PLAIN + t for t in ("str", "int", "float", "bool", "null", "seq", "map"))}


class _Function:
    """A `!function` tag as written, with its line, until it is checked against CHECKS."""

    def __init__(self, name: str, line: int) -> None:
        self.name, self.line = name, line


class _TaskLoader(yaml.SafeLoader):
    """YAML's safe loader plus the `!function` tag, read as a name (never imported)."""


def _function(loader: yaml.SafeLoader, node: yaml.Node) -> _Function:
    name = str(loader.construct_scalar(node)) if isinstance(node, yaml.ScalarNode) else "(not a name)"
    return _Function(name, node.start_mark.line + 1)


_TaskLoader.add_constructor("!function", _function)


def _refuse_tags(node: yaml.Node, name: str) -> None:
    if node.tag not in _TAGS:
        raise BadInput(
            f"{name}:{node.start_mark.line + 1}: the tag {node.tag[:40]} is not accepted in a task.yaml; "
            "plain values and `!function checks.NAME` only."
        )
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            _refuse_tags(key, name)
            _refuse_tags(value, name)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_tags(item, name)


def _read(path: Path, name: str) -> dict[str, Any]:
    text = read_bounded(path, name, MAX_BYTES).decode("utf-8", errors="replace")
    try:
        check_events(text, name)
        loader = _TaskLoader(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _refuse_tags(node, name)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        said = " ".join(str(getattr(exc, "problem", None) or exc).split())[:160]
        raise BadInput(f"{name}{line}: YAML syntax error: {said}. Fix the file and try again.") from None
    if not isinstance(data, dict):
        raise BadInput(f"{name}: expected a YAML mapping of the task's fields, found {type(data).__name__}.")
    return data


def _bind(value: Any, name: str, where: str) -> Any:
    """`!function` tags replaced by labctl's own checks; any other name refused with its file and line."""
    if isinstance(value, _Function):
        check = CHECKS.get(value.name)
        if check is None:
            allowed = ", ".join(CHECKS)
            raise BadInput(
                f"{name}:{value.line}: {where}: `!function {value.name[:60]}` would run the lab's Python on this "
                f"host; a lab's task set may name labctl's own checks only ({allowed})."
            )
        return check[0]
    if isinstance(value, dict):
        return {k: _bind(v, name, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_bind(v, name, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _check_metrics(config: dict[str, Any], name: str) -> None:
    metrics = config.get("metric_list", [])
    if not isinstance(metrics, list):
        raise BadInput(f"{name}: metric_list: a list of metrics.")
    for i, entry in enumerate(metrics):
        metric = entry.get("metric") if isinstance(entry, dict) else None
        if not isinstance(metric, str) or not METRIC.fullmatch(metric):
            raise BadInput(
                f"{name}: metric_list[{i}].metric: a metric's name is a plain word (letters, digits, _); a path "
                "or a function would load code."
            )
        if entry.get("hf_evaluate"):
            raise BadInput(
                f"{name}: metric_list[{i}].hf_evaluate: loads a metric script through `evaluate`; "
                "use the harness's own metrics."
            )


def read_task_config(path: Path, display: str = "", _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """task.yaml as lm-evaluation-harness would read it (includes merged, local keys win), checked as above."""
    name = display or str(path)
    if path.is_symlink() and not path.resolve().is_relative_to(path.parent.resolve()):
        raise BadInput(f"{name}: leads outside the task set's folder (to {path.resolve()}); copy the file in.")
    if len(_seen) > MAX_INCLUDE_DEPTH:
        raise BadInput(f"{name}: includes nest more than {MAX_INCLUDE_DEPTH} deep; flatten them.")
    data = _read(path, name)
    includes = data.pop("include", None)
    merged: dict[str, Any] = {}
    for include in includes if isinstance(includes, list) else [] if includes is None else [includes]:
        if not isinstance(include, str) or not INCLUDE.fullmatch(include):
            raise BadInput(
                f"{name}: include: {str(include)[:60]!r} is not a YAML file beside the task.yaml; an include names a "
                "file in the task set's own folder (no / or ..)."
            )
        target = path.parent / include
        if not target.resolve().is_relative_to(path.parent.resolve()):
            raise BadInput(
                f"{name}: include: {include} leads outside the task set's folder (to {target.resolve()}); copy the "
                "file in instead of linking it."
            )
        if target in _seen or target == path:
            raise BadInput(f"{name}: include: {include} includes itself (a cycle).")
        if not target.is_file():
            raise BadInput(f"{name}: include: {include} is not a file in {path.parent.name}/.")
        included = read_task_config(target, str(Path(name).parent / include), (*_seen, path))
        included.pop("task_list", None)
        merged.update(included)
    merged.update(data)
    config: dict[str, Any] = _bind(merged, name, "")
    _check_metrics(config, name)
    return config


def sandbox_templates() -> None:
    """lm-evaluation-harness renders every template through `lm_eval.utils.env`: make it a sandboxed Jinja
    environment with the same settings and filter, so a template can read a document and nothing else."""
    from jinja2 import BaseLoader, StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from lm_eval import utils

    if isinstance(utils.env, ImmutableSandboxedEnvironment):
        return
    env = ImmutableSandboxedEnvironment(loader=BaseLoader(), undefined=StrictUndefined, keep_trailing_newline=True)
    env.filters["regex_replace"] = utils.regex_replace
    utils.env = env
