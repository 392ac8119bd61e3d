"""The package's modules, each read and parsed once per test process: the architecture checks scan every
module several times, and parsing 300 files over and over was most of their time."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def imports_of(path: Path) -> frozenset[str]:
    """Every module a file imports (`import a.b`, `from a.b import c`: a.b)."""
    names: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return frozenset(names)
