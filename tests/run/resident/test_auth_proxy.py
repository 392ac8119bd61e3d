"""labctl's authenticating proxy in front of an engine whose own key leaves a model-running route open, with
the harness engine (fast): the engine's HTTP contract in the lab says the route is open, so `up --resident`
fronts it with the proxy image (`make auth-proxy-image`) and binds the engine to loopback. What answers
without a key is measured at the endpoint, recorded and said by `share`; a rotation takes effect at the proxy."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from helpers.auth_proxy import pin_contract_version, require_proxy_image, write_contract
from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import containers_of, labctl, record, up, write_profile

from labctl.catalog.http_contracts import http_contract_path, load_http_contract
from labctl.host.engine.open_routes import probe_open_routes
from labctl.run.resident.lockdown import AUTH_PROXY_IMAGE

pytestmark = pytest.mark.docker


@pytest.fixture
def need_proxy_image() -> None:
    require_proxy_image()


def start(lab: Path, home: Path, open_chat: bool, *args: str) -> tuple[dict, str, str]:
    """A resident harness whose HTTP contract says /v1/chat/completions is (or is not) left open by its key."""
    write_contract(lab, open_chat)
    port = free_port()
    write_profile(lab, "res", port)
    pin_contract_version(lab, "res")
    result = up(lab, home, "res", "--resident", *args)
    assert result.code == 0, result.stderr
    info = json.loads(result.stdout)
    shared = labctl(lab, home, "share", info["run_id"], "--json")
    assert shared.code == 0, shared.stderr
    return info, json.loads(shared.stdout)["api_key"], f"http://127.0.0.1:{port}"


def chat(info: dict, key: str) -> str | None:
    client = openai.OpenAI(base_url=info["base_url"], api_key=key, max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    return (
        client.chat.completions.create(model=info["model"], messages=messages, max_tokens=2).choices[0].message.content
    )  # type: ignore[arg-type]


def test_an_open_model_route_gets_the_proxy(lab: Path, home: Path, need_proxy_image: None) -> None:
    info, key, url = start(lab, home, open_chat=True)
    for path in ("/v1/models", "/metrics", "/version", "/anything"):
        assert httpx.get(url + path, timeout=10).status_code == 401, path
        assert httpx.get(url + path, headers={"Authorization": "Bearer sk-wrong-0123456789abcdef"}).status_code == 401
    assert httpx.post(url + "/v1/chat/completions", json={}, timeout=10).status_code == 401
    assert httpx.get(url + "/health", timeout=10).status_code == 200  # readiness: the one open path
    assert httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    assert chat(info, key)
    status = json.loads(labctl(lab, home, "status", "--json").stdout)
    mine = next(s for s in status if s["run_id"] == info["run_id"])
    assert mine["health"] == "healthy" and mine["requests_served"] >= 1  # read from the engine, behind the proxy
    resident = record(home, info["run_id"])["resident"]
    assert resident["proxy"] == AUTH_PROXY_IMAGE and resident["open_paths"] == ["/health"]
    assert resident["open_model_paths"] == []
    services = {_service(c) for c in containers_of(info["run_id"])}
    assert services == {"serve", "auth-proxy"}
    compose = (home / "runs" / info["run_id"] / "compose.yaml").read_text()
    assert key not in compose
    argv = yaml.safe_load(compose)["services"]["serve"]["command"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == str(resident["proxy_engine_port"]) != url.rsplit(":", 1)[1]
    text = labctl(lab, home, "share", info["run_id"]).stdout
    assert "open without a key: /health (readiness)" in text and "proxy" in text
    shown = labctl(lab, home, "show", info["run_id"]).stdout
    assert "open without a key: /health (readiness)" in shown and AUTH_PROXY_IMAGE in shown

    bench = labctl(lab, home, "bench", info["run_id"], "--workload", "latency-probe", "--requests", "8", "--json")
    assert bench.code == 0, bench.stderr
    assert json.loads(bench.stdout)["telemetry"]["engine"]["samples"] >= 1  # /metrics scraped with the key

    # Behind the proxy the engine answers to its own key, which nobody is given: not to the shared one.
    engine = f"http://127.0.0.1:{resident['proxy_engine_port']}"
    assert httpx.get(engine + "/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 401
    engine_key = (home / ".state" / "keys" / info["run_id"] / "engine_key").read_text().strip()
    assert engine_key and engine_key != key and engine_key not in text + compose
    assert httpx.get(engine + "/v1/models", headers={"Authorization": f"Bearer {engine_key}"}).status_code == 200
    # Past the proxy, on the engine's own loopback port, what `share` says answers without a key is what does.
    port_line = f"engine's own port 127.0.0.1:{resident['proxy_engine_port']} behind the proxy: every local user"
    assert port_line in text and port_line in shown, text
    said = json.loads(labctl(lab, home, "share", info["run_id"], "--json").stdout)["engine_port_open_without_key"]
    contract = load_http_contract(http_contract_path(lab / "engines", "harness", "1.0"))  # pinned by start()
    measured = [r.path for r in probe_open_routes(engine, contract.routes)]
    # every route that answers there without a key is named (this test's contract also calls chat open, which
    # the harness, unlike the engine the contract stands for, still guards with its own key)
    assert said == resident["engine_port_open"] and set(measured) <= set(said), (said, measured)
    assert sorted(said) == sorted(r.path for r in contract.open_routes())
    assert "/v1/chat/completions" in resident["engine_port_open_model"] and "(runs the model!)" in text

    started = _started_at(info["run_id"])
    old = key
    assert labctl(lab, home, "rotate-key", info["run_id"]).code == 0
    assert _started_at(info["run_id"]) == started  # the proxy reloads its keys; the engine serves on
    new = json.loads(labctl(lab, home, "share", info["run_id"], "--json").stdout)["api_key"]
    assert new != old
    assert httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {old}"}).status_code == 401
    with pytest.raises(openai.AuthenticationError):
        chat(info, old)
    assert chat(info, new)
    for container in containers_of(info["run_id"]):
        seen = subprocess.run(["docker", "inspect", container], capture_output=True, text=True).stdout
        logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
        assert not {old, new, engine_key} & {w for w in (seen + logs.stdout + logs.stderr).replace('"', " ").split()}

    # A proxy killed outside labctl is recorded like a dead engine, and share warns instead of handing out its URL.
    proxy = next(c for c in containers_of(info["run_id"]) if _service(c) == "auth-proxy")
    subprocess.run(["docker", "kill", proxy], capture_output=True, check=True)
    status = labctl(lab, home, "status")
    assert "its authenticating proxy is not running" in status.stderr, status.stderr
    assert "Docker says: exit code 137 (SIGKILL)" in status.stderr, status.stderr
    assert record(home, info["run_id"])["status"] == "exited"
    warned = labctl(lab, home, "share", info["run_id"])
    assert f"warning: run {info['run_id']} is exited: its authenticating proxy is not running" in warned.stderr
    assert json.loads(labctl(lab, home, "share", info["run_id"], "--json").stdout)["status"] == "exited"
    assert labctl(lab, home, "down", info["run_id"]).code == 0
    assert not containers_of(info["run_id"])


def test_guarded_engine_gets_no_proxy_and_share_lists_what_is_open(lab: Path, home: Path) -> None:
    info, key, url = start(lab, home, open_chat=False)
    assert {_service(c) for c in containers_of(info["run_id"])} == {"serve"}
    resident = record(home, info["run_id"])["resident"]
    assert resident["proxy"] == "" and resident["open_model_paths"] == []
    assert resident["open_paths"] == ["/health", "/metrics", "/version"]  # the harness guards only /v1/*
    text = labctl(lab, home, "share", info["run_id"]).stdout
    assert "open without a key: /health (readiness), /metrics, /version" in text


def test_what_the_proxy_cannot_front_is_refused_before_anything_starts(lab: Path, home: Path, tmp_path: Path) -> None:
    key_file = tmp_path / "keys.txt"
    key_file.write_text('sk-quote"in-the-middle-0123456789\n')
    key_file.chmod(0o600)
    write_contract(lab, open_chat=True)
    write_profile(lab, "res", free_port())
    profile = lab / "engines" / "harness" / "profiles" / "res.yaml"
    profile.write_text(profile.read_text() + 'engine_version: "1.0"\n')
    refused = up(lab, home, "res", "--resident", "--key-file", str(key_file))
    assert refused.code == 2 and "letters, digits and ._~+/=- only" in refused.stderr
    assert "quote" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    profile.write_text(profile.read_text() + "network: ports\n")
    refused = up(lab, home, "res", "--resident")
    assert refused.code == 2 and "runs only with `network: host`" in refused.stderr
    assert not (home / "runs").exists() and not (home / ".state" / "keys").exists()


def _service(container: str) -> str:
    fmt = '{{index .Config.Labels "com.docker.compose.service"}}'
    return subprocess.run(["docker", "inspect", "-f", fmt, container], capture_output=True, text=True).stdout.strip()


def _started_at(run_id: str) -> str:
    serve = next(c for c in containers_of(run_id) if _service(c) == "serve")
    return subprocess.run(
        ["docker", "inspect", "-f", "{{.State.StartedAt}}", serve], capture_output=True, text=True
    ).stdout.strip()
