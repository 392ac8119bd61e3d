"""Engine HTTP-surface contracts: which routes an engine's server declares, which of them its API key
guards, which run the model, its metric names and what turns them on, and what readiness means.

A contract (`engines/<engine>/http/<version>.yaml`) is read from the engine's own code at that version:
the FastAPI source of the exact PyPI wheel for vLLM and SGLang (`make contracts`), the public source for
TensorRT-LLM and Atlas (read by hand, repository and commit recorded). Pure: labctl's hardened YAML
reader and `labctl.errors` only.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labctl.catalog.contracts import Malformed, check_keys
from labctl.catalog.lab import Lab
from labctl.catalog.sourcefile import load_yaml_data
from labctl.errors import BadInput

SCHEMA = 1
MAX_BYTES = 512 * 1024
MAX_ROUTES = 1000
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "WEBSOCKET")
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_PATH = re.compile(r"/[A-Za-z0-9_.{}:/-]{0,200}")
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(:path)?\}")
_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,200}")
_TEXT_MAX = 2000


@dataclass(frozen=True)
class Route:
    path: str
    methods: tuple[str, ...]
    key_guarded: bool  # with the engine's key set, a request without it is refused
    runs_model: bool  # a request can make the engine run its model (generate, encode, score, …)
    prefix: bool = False  # a mounted app: every path under it answers (vLLM's /metrics)
    when: str | None = None  # the route exists only under this condition (a flag, a variable, a model kind)
    sources: tuple[str, ...] = ()
    deprecated: str | None = None  # the engine's own word that the route is deprecated

    def matches(self, path: str) -> bool:
        if self.prefix:
            return path == self.path or path.startswith(self.path.rstrip("/") + "/")
        return _route_regex(self.path).fullmatch(path) is not None


@dataclass(frozen=True)
class KeyRule:
    mechanism: str
    guards: str  # in the engine's own terms: "/v1 prefix only", "all but /health*, /ready*, /metrics*"


@dataclass(frozen=True)
class HttpContract:
    engine: str
    version: str
    provenance: dict[str, Any]
    routes: tuple[Route, ...]
    key: KeyRule | None  # None: the engine has no key mechanism
    metrics_route: str | None
    metrics_enabled_by: tuple[str, ...]  # engine options that must be given for metrics to be served
    metric_names: tuple[str, ...]
    readiness_route: str
    readiness_means: str
    path: Path | None = None

    def route_for(self, path: str, method: str | None = None) -> Route | None:
        """The route that answers `path` (exact routes before mounted prefixes)."""
        hits = [r for r in self.routes if r.matches(path) and (method is None or method.upper() in r.methods)]
        hits.sort(key=lambda r: (r.prefix, "{" in r.path))
        return hits[0] if hits else None

    def has_route(self, path: str, method: str | None = None) -> bool:
        return self.route_for(path, method) is not None

    def open_routes(self) -> tuple[Route, ...]:
        """Routes a request without the key reaches even when the key is set (all of them if no key exists)."""
        return tuple(r for r in self.routes if not r.key_guarded or self.key is None)

    def open_model_routes(self) -> tuple[Route, ...]:
        """Routes that run the model and stay open without the key: what a resident deployment must lock."""
        return tuple(r for r in self.open_routes() if r.runs_model)

    def serves_metrics(self, argv: list[str] | tuple[str, ...]) -> bool:
        """Whether the metrics route answers for this command line (every enabling option present)."""
        words = {w.split("=", 1)[0] for w in argv}
        return self.metrics_route is not None and all(flag in words for flag in self.metrics_enabled_by)


def http_contract_path(engines_dir: Path, engine: str, version: str) -> Path:
    if not _SAFE.fullmatch(engine):
        raise BadInput(f"engine name {engine!r} is not a plain name")
    if not _SAFE.fullmatch(version):
        raise BadInput(f"engine version {version!r} is not a plain version string")
    return Path(engines_dir) / engine / "http" / f"{version}.yaml"


@functools.lru_cache(maxsize=512)
def _route_regex(path: str) -> re.Pattern[str]:
    out, last = [], 0
    for m in _PARAM.finditer(path):
        out.append(re.escape(path[last : m.start()]))
        out.append(".+" if m.group(2) else "[^/]+")
        last = m.end()
    out.append(re.escape(path[last:]))
    return re.compile("".join(out))


def _text(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v.strip() or len(v) > _TEXT_MAX or not v.isprintable():
        raise Malformed(f"{where}: a line of text (at most {_TEXT_MAX} characters)")
    return v


def _str_list(v: Any, where: str, *, empty: bool = True) -> tuple[str, ...]:
    if not isinstance(v, list) or (not v and not empty) or len(v) > MAX_ROUTES:
        raise Malformed(f"{where}: expected a list of strings")
    return tuple(_text(x, f"{where}[{i}]") for i, x in enumerate(v))


def _bool(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise Malformed(f"{where}: expected true or false")
    return v


def _route_path(v: Any, where: str) -> str:
    if not isinstance(v, str) or not _PATH.fullmatch(v):
        raise Malformed(f"{where}: a URL path such as /v1/models")
    return v


def _route(d: Any, where: str) -> Route:
    d = check_keys(
        d,
        where,
        {"path", "methods", "key_guarded", "runs_model"},
        frozenset({"prefix", "when", "sources", "deprecated"}),
    )
    methods = _str_list(d["methods"], f"{where}.methods", empty=False)
    if any(m not in METHODS for m in methods) or len(set(methods)) != len(methods):
        raise Malformed(f"{where}.methods: distinct, from {', '.join(METHODS)}")
    when, deprecated = d.get("when"), d.get("deprecated")
    return Route(
        _route_path(d["path"], f"{where}.path"),
        methods,
        _bool(d["key_guarded"], f"{where}.key_guarded"),
        _bool(d["runs_model"], f"{where}.runs_model"),
        _bool(d.get("prefix", False), f"{where}.prefix"),
        None if when is None else _text(when, f"{where}.when"),
        _str_list(d.get("sources", []), f"{where}.sources"),
        None if deprecated is None else _text(deprecated, f"{where}.deprecated"),
    )


def _require(d: dict[str, Any], names: tuple[str, ...]) -> None:
    missing = [n for n in names if n not in d]
    if missing:
        raise Malformed(f"provenance ({d['source']}): missing {', '.join(missing)}")


def _provenance(d: Any) -> dict[str, Any]:
    d = check_keys(
        d,
        "provenance",
        {"source", "files", "extracted_by"},
        frozenset({"package", "wheel", "wheel_sha256", "repo", "commit", "note", "regenerate"}),
    )
    if d["source"] not in ("pypi-wheel", "github"):
        raise Malformed("provenance.source: pypi-wheel or github")
    _str_list(d["files"], "provenance.files", empty=False)
    _text(d["extracted_by"], "provenance.extracted_by")
    if d["source"] == "pypi-wheel":
        _require(d, ("package", "wheel", "wheel_sha256"))
        if not re.fullmatch(r"[0-9a-f]{64}", str(d["wheel_sha256"])):
            raise Malformed("provenance.wheel_sha256: 64 hex digits")
    else:
        _require(d, ("repo", "commit"))
        if not re.fullmatch(r"[0-9a-f]{40}", str(d["commit"])):
            raise Malformed("provenance.commit: 40 hex digits")
    for k in ("package", "wheel", "repo", "note", "regenerate"):
        if k in d:
            _text(d[k], f"provenance.{k}")
    return dict(d)


def _parse(doc: Any) -> HttpContract:
    doc = check_keys(
        doc, "contract", {"schema", "engine", "version", "provenance", "routes", "key", "metrics", "readiness"}
    )
    if doc["schema"] != SCHEMA:
        raise Malformed(f"schema: expected {SCHEMA}, found {doc['schema']!r}")
    engine, version = doc["engine"], doc["version"]
    if not isinstance(engine, str) or not _SAFE.fullmatch(engine):
        raise Malformed("engine: the engine folder's name")
    if not isinstance(version, str) or not _SAFE.fullmatch(version):
        raise Malformed("version: a quoted version string")
    raw = doc["routes"]
    if not isinstance(raw, list) or not raw or len(raw) > MAX_ROUTES:
        raise Malformed(f"routes: a list of 1 to {MAX_ROUTES} routes")
    routes = tuple(_route(r, f"routes[{i}]") for i, r in enumerate(raw))
    seen = [r.path for r in routes]
    if len(set(seen)) != len(seen):
        raise Malformed("routes: a path appears twice (list its methods once)")
    key = None
    if doc["key"] is not None:
        k = check_keys(doc["key"], "key", {"mechanism", "guards"})
        key = KeyRule(_text(k["mechanism"], "key.mechanism"), _text(k["guards"], "key.guards"))
    elif any(r.key_guarded for r in routes):
        raise Malformed("key: null (no key mechanism), yet a route says key_guarded: true")
    m = check_keys(doc["metrics"], "metrics", {"route", "enabled_by", "names"}, frozenset({"note"}))
    if "note" in m:
        _text(m["note"], "metrics.note")
    metrics_route = None if m["route"] is None else _route_path(m["route"], "metrics.route")
    enabled_by = _str_list(m["enabled_by"], "metrics.enabled_by")
    if not all(f.startswith("-") for f in enabled_by):
        raise Malformed("metrics.enabled_by: engine options, each starting with '-'")
    names = _str_list(m["names"], "metrics.names")
    if not all(_METRIC.fullmatch(n) for n in names):
        raise Malformed("metrics.names: Prometheus metric names")
    r = check_keys(doc["readiness"], "readiness", {"route", "means"})
    contract = HttpContract(
        engine,
        version,
        _provenance(doc["provenance"]),
        routes,
        key,
        metrics_route,
        enabled_by,
        names,
        _route_path(r["route"], "readiness.route"),
        _text(r["means"], "readiness.means"),
    )
    for name, route in (("readiness.route", contract.readiness_route), ("metrics.route", metrics_route)):
        if route is not None and not contract.has_route(route, "GET"):
            raise Malformed(f"{name}: {route} is not a GET route of routes")
    return contract


def load_http_contract(path: Path) -> HttpContract:
    path = Path(path)
    doc = load_yaml_data(path, max_bytes=MAX_BYTES)
    try:
        contract = _parse(doc)
    except Malformed as e:
        raise BadInput(f"{path}: bad HTTP contract: {e}") from None
    if path.parent.name == "http" and (path.parent.parent.name, path.stem) != (contract.engine, contract.version):
        raise BadInput(
            f"{path}: bad HTTP contract: says {contract.engine} {contract.version}, but lives at "
            f"{path.parent.parent.name}/http/{path.stem}.yaml"
        )
    return dataclasses.replace(contract, path=path)


def load_engine_http_contract(engines_dir: Path, engine: str, version: str) -> HttpContract:
    return load_http_contract(http_contract_path(engines_dir, engine, version))


def contract_for(lab: Lab, engine: str, version: str | None) -> HttpContract | None:
    """The contract of `engine` at `version` in this lab; None when the lab has none for that version (or the
    profile names none): then nothing is known about which routes the key leaves open."""
    if version is None or not _SAFE.fullmatch(engine) or not _SAFE.fullmatch(version):
        return None
    path = http_contract_path(lab.engines_dir, engine, version)
    return load_http_contract(path) if path.is_file() else None
