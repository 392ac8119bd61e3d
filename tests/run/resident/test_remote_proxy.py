"""labctl's authenticating proxy on the remote lab host `labb` (`make remote-lab`), reached only over Docker's
ssh:// transport: the proxy image is copied there by image id, the engine's own key crosses in the run's key
volume beside the clients' keys, the engine gets a loopback port free on labb, and a rotation reloads the
proxy there. Only loopback and 10.201.0.2 (inside the namespace the project's own script creates) are used."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from helpers.auth_proxy import pin_contract_version, require_proxy_image, write_contract
from helpers.lifecycle_helpers import write_profile
from helpers.support import (
    LABB_ADDRESS,
    Result,
    free_labb_port,
    labb_entry,
    remote_docker,
    remote_names,
    remove_labb_runs,
    run_labctl,
)

from labctl.run.resident.lockdown import AUTH_PROXY_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.lab, pytest.mark.labb]  # labb's own tier: one test at a time


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "home"
    folder.mkdir()
    yield folder
    remove_labb_runs(folder)


@pytest.fixture
def lab(lab: Path) -> Path:
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"labb": labb_entry()}}))
    return lab


def labctl(lab: Path, home: Path, *args: str) -> Result:
    return run_labctl(*args, lab=lab, env={"LABCTL_HOME": str(home), "LABCTL_LOCK_FILE": str(home / "gpus.lock")})


def chat(base_url: str, model: str, key: str) -> str:
    client = openai.OpenAI(base_url=base_url, api_key=key, timeout=30, max_retries=0)
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    return str(reply.choices[0].message.content)


def image_id(*docker: str) -> str:
    done = subprocess.run(
        [*docker, "image", "inspect", "-f", "{{.Id}}", AUTH_PROXY_IMAGE], capture_output=True, text=True
    )
    return done.stdout.strip()


def service_of(name: str) -> str:
    return remote_docker("inspect", "-f", '{{index .Config.Labels "com.docker.compose.service"}}', name).stdout.strip()


def test_an_open_model_route_on_labb_gets_the_proxy_there(lab: Path, home: Path) -> None:
    require_proxy_image()
    # An older proxy build on labb under the same name: up must replace it with this machine's (ids compared)
    if image_id("docker", "-H", f"ssh://labctl-remote@{LABB_ADDRESS}"):
        stale = subprocess.run(
            ["docker", "-H", f"ssh://labctl-remote@{LABB_ADDRESS}", "build", "-q", "-t", AUTH_PROXY_IMAGE, "-"],
            input=f"FROM {AUTH_PROXY_IMAGE}\nLABEL stale=1\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert stale.returncode == 0, stale.stderr
        assert image_id("docker", "-H", f"ssh://labctl-remote@{LABB_ADDRESS}") != image_id("docker")
    write_contract(lab, open_chat=True)
    port = free_labb_port()
    write_profile(lab, "res", port)
    pin_contract_version(lab, "res")
    result = labctl(lab, home, "up", "harness", "--profile", "res", "--allow-unpinned", "--host", "labb", "--json",
                    "--resident", "--bind", LABB_ADDRESS)  # fmt: skip
    assert result.code == 0, result.stderr
    info = json.loads(result.stdout.strip().splitlines()[-1])
    run_id, model = info["run_id"], info["model"]
    shared = labctl(lab, home, "share", run_id, "--json")
    assert shared.code == 0, shared.stderr
    access = json.loads(shared.stdout)
    key, url = access["api_key"], f"http://{LABB_ADDRESS}:{port}"
    assert access["base_url"] == f"{url}/v1" and access["open_without_key"] == ["/health"], access

    # The proxy, on labb, in front: only the readiness probe answers without the key.
    assert image_id("docker", "-H", f"ssh://labctl-remote@{LABB_ADDRESS}") == image_id("docker")
    names = remote_names(f"labctl.run_id={run_id}")
    assert sorted(service_of(n) for n in names) == ["auth-proxy", "serve"]
    for path in ("/v1/models", "/metrics", "/version"):
        assert httpx.get(url + path, timeout=10).status_code == 401, path
    assert httpx.post(url + "/v1/chat/completions", json={}, timeout=10).status_code == 401
    assert httpx.get(url + "/health", timeout=10).status_code == 200
    assert chat(f"{url}/v1", model, key)
    assert chat(info["base_url"], model, key)  # labctl's own forward reaches the proxy too

    # The engine binds labb's loopback at the recorded port, with its own key from the volume there.
    record = json.loads((home / "runs" / run_id / "record.json").read_text())
    resident = record["resident"]
    assert resident["proxy"] == AUTH_PROXY_IMAGE and resident["open_model_paths"] == []
    engine_port = resident["proxy_engine_port"]
    assert 20000 <= engine_port < 32000 and engine_port != port
    serve = next(n for n in names if service_of(n) == "serve")
    argv = json.loads(remote_docker("inspect", "-f", "{{json .Config.Cmd}}", serve).stdout)
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == str(engine_port)
    volume = resident["auth_volume"]
    mountpoint = Path(remote_docker("volume", "inspect", "-f", "{{.Mountpoint}}", volume).stdout.strip())
    engine_key = (mountpoint / "engine_key").read_text().strip()  # labb's dockerd keeps its data root here
    assert engine_key and engine_key != key and (mountpoint / "api_key").read_text().split() == [key]
    assert oct((mountpoint / "engine_key").stat().st_mode & 0o777) == "0o400"

    # A rotation rewrites api_key on labb and reloads the proxy there: the engine serves on, unrestarted.
    started = remote_docker("inspect", "-f", "{{.State.StartedAt}}", serve).stdout
    rotated = labctl(lab, home, "rotate-key", run_id)
    assert rotated.code == 0, rotated.stderr
    new = json.loads(labctl(lab, home, "share", run_id, "--json").stdout)["api_key"]
    assert new != key and remote_docker("inspect", "-f", "{{.State.StartedAt}}", serve).stdout == started
    assert httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 401
    with pytest.raises(openai.AuthenticationError):
        chat(f"{url}/v1", model, key)
    assert chat(f"{url}/v1", model, new)
    assert (mountpoint / "engine_key").read_text().strip() == engine_key

    seen = [remote_docker("inspect", *names).stdout, remote_docker("logs", *names).stdout]
    seen += [p.read_text(errors="replace") for p in (home / "runs" / run_id).rglob("*") if p.is_file()]
    words = {w for text in seen for w in text.replace('"', " ").split()}
    assert not {key, new, engine_key} & words
    down = labctl(lab, home, "down", run_id)
    assert down.code == 0, down.stderr
    assert remote_names(f"labctl.run_id={run_id}") == []
    assert remote_docker("volume", "ls", "-q", "--filter", f"name={volume}").stdout.strip() == ""
