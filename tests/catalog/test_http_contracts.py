"""HTTP-surface contracts (engines/<engine>/http/<version>.yaml): every shipped one loads, the facts labctl
depends on are in them, and a contract that breaks the schema is refused with one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.support import REPO

from labctl.catalog.http_contracts import (
    http_contract_path,
    load_engine_http_contract,
    load_http_contract,
)
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import list_profile_names, load_profile
from labctl.errors import BadInput

ENGINES = REPO / "engines"
SHIPPED = sorted(ENGINES.glob("*/http/*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.parent.name}-{p.stem}")
def test_every_shipped_contract_loads(path: Path) -> None:
    contract = load_http_contract(path)
    assert contract.has_route(contract.readiness_route, "GET")
    assert contract.routes == tuple(sorted(contract.routes, key=lambda r: r.path))


def test_every_profile_pins_a_version_with_an_http_contract() -> None:
    lab = Lab(REPO)
    for engine in ("vllm", "vllm-cpu", "sglang", "trtllm", "atlas"):
        for name in list_profile_names(lab, engine):
            version = str(load_profile(lab, engine, name).spec["engine_version"])
            assert http_contract_path(ENGINES, engine, version).is_file(), (engine, name, version)


def test_vllm_leaves_model_routes_open_behind_its_key() -> None:
    c = load_engine_http_contract(ENGINES, "vllm", "0.34.0")
    assert c.key is not None and not c.route_for("/health").key_guarded  # type: ignore[union-attr]
    assert c.route_for("/v1/chat/completions").key_guarded  # type: ignore[union-attr]
    open_model = {r.path for r in c.open_model_routes()}
    assert "/invocations" in open_model and "/v1/chat/completions" not in open_model
    assert not c.route_for("/tokenize").key_guarded and not c.route_for("/tokenize").runs_model  # type: ignore[union-attr]
    assert c.route_for("/metrics/anything").prefix  # type: ignore[union-attr]


def test_sglang_metrics_need_the_flag_and_server_info_is_not_deprecated() -> None:
    for version in ("0.5.19", "0.5.23"):
        c = load_engine_http_contract(ENGINES, "sglang", version)
        assert c.metrics_enabled_by == ("--enable-metrics",)
        assert not c.serves_metrics(["--model-path", "M"]) and c.serves_metrics(["--enable-metrics"])
        assert c.route_for("/server_info").deprecated is None  # type: ignore[union-attr]
        assert c.route_for("/get_server_info").deprecated  # type: ignore[union-attr]
        assert c.open_model_routes() == ()
    assert load_engine_http_contract(ENGINES, "sglang", "0.5.23").has_route("/ready")
    assert not load_engine_http_contract(ENGINES, "sglang", "0.5.19").has_route("/ready")


def test_a_keyless_engine_leaves_every_model_route_open() -> None:
    c = load_engine_http_contract(ENGINES, "trtllm", "1.2.1")
    assert c.key is None
    assert {r.path for r in c.open_model_routes()} == {"/v1/chat/completions", "/v1/completions", "/v1/responses"}


def _write(tmp_path: Path, doc: dict[str, object], name: str = "0.1.0") -> Path:
    folder = tmp_path / "eng" / "http"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _minimal() -> dict[str, object]:
    return {
        "schema": 1,
        "engine": "eng",
        "version": "0.1.0",
        "provenance": {
            "source": "github",
            "repo": "o/r",
            "commit": "a" * 40,
            "files": ["f.py"],
            "extracted_by": "hand",
        },
        "routes": [
            {"path": "/health", "methods": ["GET"], "key_guarded": False, "runs_model": False},
            {"path": "/v1/x", "methods": ["POST"], "key_guarded": True, "runs_model": True},
        ],
        "key": {"mechanism": "--key", "guards": "/v1"},
        "metrics": {"route": None, "enabled_by": [], "names": []},
        "readiness": {"route": "/health", "means": "200 when ready"},
    }


def test_a_minimal_contract_loads(tmp_path: Path) -> None:
    c = load_http_contract(_write(tmp_path, _minimal()))
    assert c.open_model_routes() == () and not c.serves_metrics([])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(extra=1), "unknown key(s) extra"),
        (lambda d: d["routes"].append({**d["routes"][0], "methods": ["POST"]}), "a path appears twice"),
        (lambda d: d["routes"][0].update(path="health"), "a URL path"),
        (lambda d: d["routes"][0].update(path="/a b"), "a URL path"),
        (lambda d: d["routes"][0].update(methods=["FETCH"]), "methods"),
        (lambda d: d["routes"][0].update(key_guarded="no"), "true or false"),
        (lambda d: d.update(key=None), "key: null"),
        (lambda d: d["readiness"].update(route="/ready"), "not a GET route"),
        (lambda d: d["metrics"].update(enabled_by=["enable"]), "starting with '-'"),
        (lambda d: d["metrics"].update(names=["bad name"]), "Prometheus metric names"),
        (lambda d: d["provenance"].update(commit="abc"), "40 hex digits"),
        (lambda d: d["provenance"].update(source="pypi-wheel"), "missing package, wheel, wheel_sha256"),
        (lambda d: d.update(version="0.2.0"), "lives at eng/http/0.1.0.yaml"),
        (lambda d: d["readiness"].update(means="x" * 3000), "a line of text"),
    ],
)
def test_a_broken_contract_is_refused_in_one_line(tmp_path: Path, change, message: str) -> None:  # type: ignore[no-untyped-def]
    doc = _minimal()
    change(doc)
    with pytest.raises(BadInput) as err:
        load_http_contract(_write(tmp_path, doc))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_contract_path_is_a_plain_name() -> None:
    with pytest.raises(BadInput):
        http_contract_path(ENGINES, "../etc", "1")
    with pytest.raises(BadInput):
        http_contract_path(ENGINES, "vllm", "1/../../x")
