"""The layout is the architecture: only host/ touches Docker, processes, sockets and locks (the bench
client's own sockets aside; the harness engine and its personas are separate programs), and the library
never imports the CLI."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers.package_source import imports_of, parsed
from helpers.support import REPO

from labctl.layers import LAYERS
from labctl.layers import SEPARATE as LAYER_SEPARATE

PACKAGE = REPO / "labctl"
EDGES = {"python_on_whales", "subprocess", "socket", "fcntl"}
EXEMPT = ("host/", "harness/", "bench/client.py")


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


SEPARATE = {name: set(allowed) for name, allowed in LAYER_SEPARATE.items()}


def area_of(module: str) -> str:
    parts = module.split(".")[1:]
    if parts[:1] == ["run"] and len(parts) > 1:
        return f"run.{parts[1]}"
    return parts[0] if parts else ""


def labctl_imports(rel: str, path: Path) -> set[str]:
    package = "labctl." + rel.removesuffix(".py").replace("/", ".")
    return {name for name in imports_of(path) if name.startswith("labctl.") and name != package}


def test_no_import_runs_up_the_layers() -> None:
    rank = {area: level for level, areas in enumerate(LAYERS) for area in areas}
    offenders = []
    for rel, path in modules():
        here = area_of("labctl." + rel.removesuffix(".py").replace("/", "."))
        for name in labctl_imports(rel, path):
            there = area_of(name)
            if there == here or not there:
                continue
            if here in SEPARATE:
                ok = there in SEPARATE[here]
            else:
                ok = there in rank and rank[there] < rank.get(here, len(LAYERS))
            if not ok:
                offenders.append(f"{rel} imports {name}")
    assert offenders == []


def test_no_import_cycles() -> None:
    graph: dict[str, set[str]] = {}
    for rel, path in modules():
        name = "labctl." + rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        graph[name] = set()
        for imported in labctl_imports(rel, path):
            graph[name].add(imported)
    graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    cycles, seen, on_path = [], set(), []

    def visit(module: str) -> None:
        if module in on_path:
            cycles.append(on_path[on_path.index(module) :] + [module])
            return
        if module in seen:
            return
        seen.add(module)
        on_path.append(module)
        for dep in sorted(graph[module]):
            visit(dep)
        on_path.pop()

    for module in sorted(graph):
        visit(module)
    assert cycles == []


def test_no_module_name_names_two_subjects() -> None:
    """A file name says its subject once in the package; cli/NAME.py fronts the library's NAME and may share it."""
    seen: dict[str, list[str]] = {}
    for rel, path in modules():
        if path.name in ("__init__.py", "__main__.py") or rel.startswith("cli/"):
            continue
        seen.setdefault(path.name, []).append(rel)
    assert {name: rels for name, rels in seen.items() if len(rels) > 1} == {}


def test_the_edges_folder_is_by_subject() -> None:
    """host/ answers "where does labctl touch X?" by folder: about a dozen entries at its top, not a drawer."""
    entries = [p.name for p in (PACKAGE / "host").iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 13, sorted(entries)


def test_one_way_to_docker_per_purpose() -> None:
    """python-on-whales is imported by host/docker/daemon.py alone; the docker CLI's argv is spelled there alone
    (cli_argv, cli_argv_for) for the few places that must feed stdin or die with their ssh."""
    whales = sorted(rel for rel, path in modules() if any(n.startswith("python_on_whales") for n in imports_of(path)))
    assert whales == ["host/docker/daemon.py"]
    spelled = set()
    for rel, path in modules():
        if not rel.startswith("host/") or rel == "host/docker/daemon.py":
            continue
        for node in ast.walk(parsed(path)):
            first = node.elts[0] if isinstance(node, ast.List) and node.elts else None
            if isinstance(first, ast.Constant) and first.value == "docker":
                spelled.add(rel)
    assert spelled == set()
