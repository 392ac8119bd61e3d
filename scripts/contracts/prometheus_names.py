"""Prometheus metric names an engine declares, read statically from its source (no import).

A metric is a call to something named like a Counter, Gauge, Histogram or Summary class (prometheus_client's
own, or an engine wrapper such as vLLM's `self._counter_cls`) whose `name=` (or first argument) is a string
literal with the engine's prefix, or a variable the same file assigns such literals to (vLLM's
`vllm:cache_config_info`, declared as `name=name`). Names are given as Prometheus exposes them: prometheus_client appends
`_total` to a counter's name; a histogram is listed by its base name (`_bucket`, `_sum`, `_count` follow).
"""

from __future__ import annotations

import ast
import zipfile

KINDS = ("counter", "gauge", "histogram", "summary")


def _callee(node: ast.Call) -> str:
    f = node.func
    return (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")).lower()


def names_in_source(text: str, prefix: str) -> dict[str, str]:
    """{exposed name: kind} of the metrics declared in one file."""
    tree = ast.parse(text)
    held: dict[str, list[str]] = {}  # variable → the prefixed string literals assigned to it in this file
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.startswith(prefix):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    held.setdefault(target.id, []).append(value.value)
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        kind = next((k for k in KINDS if k in _callee(node)), None)
        if kind is None:
            continue
        arg = next((k.value for k in node.keywords if k.arg == "name"), node.args[0] if node.args else None)
        if isinstance(arg, ast.Name):
            literals = held.get(arg.id, [])
        elif isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith(prefix):
            literals = [arg.value]
        else:
            continue
        for name in literals:
            if kind == "counter":
                name = name.removesuffix("_total") + "_total"
            out[name] = kind
    return out


def names_in_wheel(wheel: str, files: tuple[str, ...], prefix: str) -> tuple[dict[str, str], list[str]]:
    """({exposed name: kind}, files read) over every .py file of the wheel under one of `files`."""
    out: dict[str, str] = {}
    read: list[str] = []
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            if name.endswith(".py") and name.startswith(files):
                found = names_in_source(z.read(name).decode("utf-8-sig"), prefix)
                if found:
                    read.append(name)
                    out.update(found)
    return dict(sorted(out.items())), read
