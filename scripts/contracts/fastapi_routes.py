"""The HTTP routes a FastAPI/Starlette server declares, read statically from its source files (no import).

Read: `@x.get/post/put/delete/patch/api_route/websocket(PATH, …)` decorators, `x.add_api_route(PATH, …,
methods=[…])` and `x.add_route(PATH, …, methods=[…])` calls, `Mount(PATH, …)` / `x.mount(PATH, …)`, and a
`prefix=` given to the `APIRouter(…)` the decorator's object was made from in the same file. A path that is
not a string literal is resolved from a module-level string constant of the same file; anything else is
reported as unresolved (the generator refuses it), never guessed.
"""

from __future__ import annotations

import ast
import zipfile
from dataclasses import dataclass, field

VERBS = {"get": "GET", "post": "POST", "put": "PUT", "delete": "DELETE", "patch": "PATCH", "head": "HEAD"}


@dataclass
class Found:
    path: str
    methods: set[str]
    sources: set[str] = field(default_factory=set)
    deprecated: str | None = None  # the handler's docstring line that says so


def _str(node: ast.AST | None, consts: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id]
    if (  # os.environ.get("NAME", "/default"): the route as served when the variable is unset
        isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv") and len(node.args) == 2
    ):
        return _str(node.args[1], consts)
    return None


def _kw(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _methods(node: ast.AST | None, default: set[str]) -> set[str]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return {str(e.value).upper() for e in node.elts if isinstance(e, ast.Constant)}
    return default


def _owner(func: ast.AST) -> str | None:
    return func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None


def routes_in_source(text: str, where: str) -> tuple[list[Found], list[str]]:
    """(routes, unresolved) of one source file; `where` names the file in the sources and messages."""
    tree = ast.parse(text)
    consts: dict[str, str] = {}
    prefixes: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            name = node.targets[0].id
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                consts[name] = value.value
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            call = node.value
            if isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", "")) == "APIRouter":
                prefix = _str(_kw(call, "prefix"), consts)
                if prefix:
                    prefixes[node.targets[0].id] = prefix
    found: list[Found] = []
    unresolved: list[str] = []

    def add(
        owner: str | None, path_node: ast.AST | None, methods: set[str], line: int, note: str | None = None
    ) -> None:
        path = _str(path_node, consts)
        if path is None:
            unresolved.append(f"{where}:{line}")
            return
        found.append(Found(prefixes.get(owner or "", "") + path, methods, {f"{where}:{line}"}, note))

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node) or ""
            summary = doc.split("\n\n", 1)[0]  # the route's own summary, not its parameters' notes
            note = next((line.strip() for line in summary.splitlines() if "deprecated" in line.lower()), None)
            for deco in node.decorator_list:
                if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)):
                    continue
                verb, owner = deco.func.attr, _owner(deco.func)
                first = deco.args[0] if deco.args else _kw(deco, "path")
                if verb in VERBS:
                    add(owner, first, {VERBS[verb]}, deco.lineno, note)
                elif verb == "api_route":
                    add(owner, first, _methods(_kw(deco, "methods"), {"GET"}), deco.lineno, note)
                elif verb == "websocket":
                    add(owner, first, {"WEBSOCKET"}, deco.lineno, note)
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            first = node.args[0] if node.args else _kw(node, "path")
            if name in ("add_api_route", "add_route"):
                add(_owner(node.func), first, _methods(_kw(node, "methods"), {"GET"}), node.lineno)
            elif name in ("mount", "Mount"):
                add(_owner(node.func) if name == "mount" else None, first, {"MOUNT"}, node.lineno)
    return found, unresolved


def routes_in_wheel(wheel: str, prefixes: tuple[str, ...], exclude: tuple[str, ...]) -> tuple[list[Found], list[str]]:
    """Routes of every .py file under `prefixes` in the wheel, except files under `exclude`, merged by path."""
    merged: dict[str, Found] = {}
    unresolved: list[str] = []
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            if not name.endswith(".py") or not name.startswith(prefixes) or name.startswith(exclude):
                continue
            text = z.read(name).decode("utf-8-sig")
            if "route" not in text and "Mount" not in text and "@" not in text:
                continue
            found, bad = routes_in_source(text, name)
            unresolved += bad
            for f in found:
                if f.path in merged:
                    merged[f.path].methods |= f.methods
                    merged[f.path].sources |= f.sources
                    merged[f.path].deprecated = merged[f.path].deprecated or f.deprecated
                else:
                    merged[f.path] = f
    return sorted(merged.values(), key=lambda f: f.path), unresolved
