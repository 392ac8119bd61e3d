"""An engine is a folder: no module of the library keys a table on an engine's name, or branches on it.
Everything engine-specific that is data lives in engines/NAME/ (the harness engine's own program,
labctl/harness/, aside: it imitates the engines it is named after)."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers.package_source import parsed
from helpers.support import REPO

PACKAGE = REPO / "labctl"
# The shipped engines whose names a table or a branch would key on.
ENGINE_NAMES = frozenset({"vllm", "vllm-cpu", "sglang", "trtllm", "atlas"})
EXEMPT = ("harness/",)
# labctl builds the harness engine's image from its own modules: that builder is the harness's own code.
HARNESS_OWN = ("run/images/harness.py",)


def _modules() -> list[tuple[str, ast.AST]]:
    return [
        (str(p.relative_to(PACKAGE)), parsed(p))
        for p in sorted(PACKAGE.rglob("*.py"))
        if not str(p.relative_to(PACKAGE)).startswith(EXEMPT)
    ]


def _engine_names_in(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string literal that is exactly an engine's name: a dict key, a set, tuple or list item, the
    other side of `engine == ...`, an argument. Docstrings and messages are longer strings and never match."""
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ENGINE_NAMES
    ]


def _harness_branches(tree: ast.AST) -> list[int]:
    """`x.engine == "harness"` and its kin: a comparison of something engine-named with the harness's name."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = [s for s in sides if isinstance(s, ast.Constant) and s.value == "harness"]
        others = [ast.unparse(s) for s in sides if not isinstance(s, ast.Constant)]
        if names and any("engine" in text for text in others):
            lines.append(node.lineno)
    return lines


def test_no_table_or_branch_is_keyed_on_an_engine_name() -> None:
    found = {rel: hits for rel, tree in _modules() if (hits := _engine_names_in(tree))}
    assert found == {}, "engine facts belong in engines/NAME/engine.yaml, read through labctl.catalog.engines"


def test_nothing_branches_on_the_harness_engine_by_name() -> None:
    found = {rel: lines for rel, tree in _modules() if rel not in HARNESS_OWN and (lines := _harness_branches(tree))}
    assert found == {}, "say what the harness is (gpu.required: false, no cpu: block), not its name"


def test_the_scan_sees_tables_and_branches() -> None:
    sample = ast.parse(
        'RULES = {"vllm": 1}\nKNOWN = ("sglang", "atlas")\nif engine == "trtllm":\n    pass\n'
        'x = "none" if record.engine == "harness" else "y"\ndoc = "vllm serve, as vLLM says"\n'
    )
    assert [name for _, name in _engine_names_in(sample)] == ["vllm", "sglang", "atlas", "trtllm"]
    assert _harness_branches(sample) == [5]


def test_every_module_is_scanned() -> None:
    scanned = {rel for rel, _ in _modules()}
    assert "catalog/memory.py" in scanned and "catalog/engine_metrics.py" in scanned
    assert not any(rel.startswith("harness/") for rel in scanned)
    assert all(Path(PACKAGE / rel).is_file() for rel in HARNESS_OWN)
