"""The layout is the architecture: only host/ touches Docker, processes, sockets and locks (the bench
client's own sockets aside; the harness engine and its personas are separate programs), and the library
never imports the CLI."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers.support import REPO

PACKAGE = REPO / "labctl"
EDGES = {"python_on_whales", "subprocess", "socket", "fcntl"}
EXEMPT = ("host/", "harness/", "bench/client.py")


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def modules() -> list[tuple[str, Path]]:
    return [(str(p.relative_to(PACKAGE)), p) for p in sorted(PACKAGE.rglob("*.py"))]


def test_only_host_touches_docker_processes_sockets_and_locks() -> None:
    offenders = {
        rel: sorted(n for n in imports_of(path) if n.split(".")[0] in EDGES)
        for rel, path in modules()
        if not rel.startswith(EXEMPT)
    }
    assert {rel: names for rel, names in offenders.items() if names} == {}


def test_the_library_never_imports_the_cli() -> None:
    offenders = [
        rel
        for rel, path in modules()
        if not rel.startswith(("cli/", "__main__")) and any(n.startswith("labctl.cli") for n in imports_of(path))
    ]
    assert offenders == []
