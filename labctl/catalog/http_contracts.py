"""An engine's HTTP surface at one version (`engines/<engine>/http/<version>.yaml`): its routes, which of them
the engine's API key guards, and which run the model. A resident deployment is locked only when every route
that runs the model refuses a request without the key."""

from __future__ import annotations

import re
from dataclasses import dataclass

from labctl.catalog.lab import Lab
from labctl.catalog.sourcefile import load_yaml_data
from labctl.errors import BadInput

_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")
_PATH = re.compile(r"/[A-Za-z0-9._~/{}-]{0,200}")
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
MAX_ROUTES = 500


@dataclass(frozen=True)
class Route:
    path: str
    methods: tuple[str, ...]
    key_guarded: bool
    runs_model: bool


@dataclass(frozen=True)
class HttpContract:
    engine: str
    version: str
    routes: tuple[Route, ...]

    @property
    def open_model_routes(self) -> tuple[Route, ...]:
        """Routes that run the model and that the engine's own key leaves open."""
        return tuple(r for r in self.routes if r.runs_model and not r.key_guarded)


def load_http_contract(lab: Lab, engine: str, version: str | None) -> HttpContract | None:
    """The contract of `engine` at `version`; None when the lab has none for it."""
    if version is None or not _VERSION.fullmatch(version):
        return None
    path = lab.engine_dir(engine) / "http" / f"{version}.yaml"
    if not path.is_file():
        return None
    name = str(path.relative_to(lab.root))
    data = load_yaml_data(path, display=name)
    items = data.get("routes") if isinstance(data, dict) else None
    if not isinstance(items, list) or not 0 < len(items) <= MAX_ROUTES:
        raise BadInput(f"{name}: give `routes:`, a list of 1 to {MAX_ROUTES} routes.")
    return HttpContract(engine, version, tuple(_route(name, i, item) for i, item in enumerate(items)))


def _route(name: str, index: int, item: object) -> Route:
    where = f"{name}: routes[{index}]"
    if not isinstance(item, dict) or set(item) != {"path", "methods", "key_guarded", "runs_model"}:
        raise BadInput(f"{where}: give exactly path, methods, key_guarded and runs_model.")
    path, methods = item["path"], item["methods"]
    if not isinstance(path, str) or not _PATH.fullmatch(path):
        raise BadInput(f"{where}.path: an HTTP path such as /v1/models.")
    if not isinstance(methods, list) or not methods or any(m not in _METHODS for m in methods):
        raise BadInput(f"{where}.methods: a list of HTTP methods from {', '.join(sorted(_METHODS))}.")
    flags = item["key_guarded"], item["runs_model"]
    if not all(isinstance(f, bool) for f in flags):
        raise BadInput(f"{where}: key_guarded and runs_model are true or false.")
    return Route(path, tuple(methods), *flags)
