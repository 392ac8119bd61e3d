"""The harness image's build context, staged by labctl itself: it holds every labctl module the image's two
programs (the harness engine, the bench client run beside a remote engine, the model fetch client on a
remote host) import, PyYAML's pure-Python
modules, and the lab's Dockerfile, with fixed times so that the legacy builder's cache follows the contents.
Building it is tested through `up` (tests/cli/test_installed_tool.py) and `make harness-image`."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers.support import REPO

from labctl.run.images.harness import FIXED_TIME, stage_context

PACKAGE = REPO / "labctl"
# The image's programs: the harness engine, the bench client beside a remote engine, the fetch client on a host.
ENTRY_POINTS = ("harness/__main__.py", "bench/bench_job.py", "host/hub/fetch_job.py")


def module_file(name: str) -> Path | None:
    base = PACKAGE.parent / name.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_closure(*entries: str) -> set[str]:
    """Every labctl module file the entry points import, at any depth (function-local imports included)."""
    todo, seen = [PACKAGE / e for e in entries], set()
    while todo:
        path = todo.pop()
        rel = str(path.relative_to(PACKAGE))
        if rel in seen:
            continue
        seen.add(rel)
        parents = [p for p in path.relative_to(PACKAGE.parent).parents if p.name][:-1]
        todo += [p / "__init__.py" for p in (PACKAGE.parent / q for q in parents) if (p / "__init__.py").is_file()]
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                found = module_file(name) if name.startswith("labctl") else None
                if found is not None:
                    todo.append(found)
    return seen


def test_the_context_holds_what_the_image_runs(tmp_path: Path) -> None:
    stage_context(tmp_path, REPO / "engines" / "harness" / "Dockerfile")
    staged = {str(p.relative_to(tmp_path / "labctl")) for p in (tmp_path / "labctl").rglob("*.py")}
    needed = imported_closure(*ENTRY_POINTS)
    assert needed <= staged, sorted(needed - staged)
    assert (tmp_path / "image-site" / "yaml" / "__init__.py").is_file()
    assert (tmp_path / "Dockerfile").read_text() == (REPO / "engines" / "harness" / "Dockerfile").read_text()
    assert not list(tmp_path.rglob("__pycache__"))
    assert {p.stat().st_mtime for p in tmp_path.rglob("*")} == {FIXED_TIME}


def test_the_dockerfile_copies_what_is_staged() -> None:
    text = (REPO / "engines" / "harness" / "Dockerfile").read_text()
    assert "COPY labctl /opt/labctl/labctl\n" in text and "COPY image-site /opt/labctl-site\n" in text
