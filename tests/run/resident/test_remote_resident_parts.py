"""Pure parts of resident deployments on remote hosts: the compose file mounting the keys from a named
volume (no host folder, no key), and what `share` tells a colleague for each kind of bind."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.support import REPO

from labctl.catalog.hosts_file import load_hosts
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile, with_overrides
from labctl.compose.docker_run import docker_run_commands
from labctl.compose.render import SECRETS_TARGET, RenderOptions, render_compose
from labctl.errors import BadInput
from labctl.host.remote.forward import Forward
from labctl.run.records.record import Endpoint, Record
from labctl.run.resident.deployments import colleague_reach

LAB = Lab(REPO)
VOLUME = "labctl-keys-20261203-120000-abcdef"


def test_keys_from_a_named_volume_are_mounted_read_only_and_the_volume_is_external() -> None:
    profile = with_overrides(load_profile(LAB, "harness", "smoke"), host="10.201.0.2")
    text = render_compose(LAB, profile, RenderOptions(secrets_volume=VOLUME, restart="unless-stopped"))
    compose = yaml.safe_load(text)
    serve = compose["services"]["serve"]
    assert serve["volumes"] == [{"type": "volume", "source": VOLUME, "target": SECRETS_TARGET, "read_only": True}]
    assert compose["volumes"] == {VOLUME: {"external": True}}  # compose never creates an empty one
    assert serve["entrypoint"][:2] == ["sh", "-c"] and f"{SECRETS_TARGET}/api_key" in serve["entrypoint"][2]
    assert "group_add" not in serve  # the file is the image user's own in the volume
    assert "--host" in serve["command"] and "10.201.0.2" in serve["command"]
    assert text == render_compose(LAB, profile, RenderOptions(secrets_volume=VOLUME, restart="unless-stopped"))
    run = docker_run_commands(text, profile.image_text, "x")[-1]
    assert f"--mount type=volume,source={VOLUME},target={SECRETS_TARGET},readonly" in run


def test_a_host_folder_still_renders_a_bind_mount_and_no_top_level_volumes() -> None:
    profile = load_profile(LAB, "harness", "smoke")
    compose = yaml.safe_load(render_compose(LAB, profile, RenderOptions(secrets_dir="/srv/keys/r1", key_group=998)))
    assert compose["services"]["serve"]["volumes"][0]["type"] == "bind"
    assert compose["services"]["serve"]["group_add"] == ["998"] and "volumes" not in compose


def remote_record(bind: str, docker: str = "ssh://labctl-remote@10.201.0.2:2202") -> Record:
    return Record(
        run_id="20261203-120000-abcdef",
        status="running",
        engine="harness",
        profile="smoke",
        served_model_name="harness-smoke",
        endpoint=Endpoint(base_url="http://127.0.0.1:41000/v1", host=bind, port=18650),
        host_entry="labb",
        docker_endpoint=docker,
        forward=Forward(41000, f"{bind}:18650", "1:1"),
    )


def test_share_gives_a_named_address_directly_and_the_hosts_own_address_for_all_addresses() -> None:
    assert colleague_reach(remote_record("10.201.0.2")) == ("http://10.201.0.2:18650/v1", None)
    assert colleague_reach(remote_record("0.0.0.0")) == ("http://10.201.0.2:18650/v1", None)
    assert colleague_reach(remote_record("fd00::2")) == ("http://[fd00::2]:18650/v1", None)


def test_share_of_a_loopback_run_gives_the_ssh_forward_over_the_endpoints_account_and_port() -> None:
    url, forward = colleague_reach(remote_record("127.0.0.1"))
    assert url == "http://127.0.0.1:18650/v1"  # not the controller's own forward (41000): it listens here only
    assert forward == ["ssh", "-N", "-L", "127.0.0.1:18650:127.0.0.1:18650", "-p", "2202", "labctl-remote@10.201.0.2"]


def test_share_of_a_local_run_is_its_base_url() -> None:
    record = Record(
        run_id="20261203-120000-abcdef",
        status="running",
        engine="harness",
        profile="smoke",
        served_model_name="harness-smoke",
        endpoint=Endpoint(base_url="http://127.0.0.1:18000/v1", host="127.0.0.1", port=18000),
    )
    assert colleague_reach(record) == ("http://127.0.0.1:18000/v1", None)


def test_a_host_entry_names_its_daemons_socket_as_that_host_sees_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LABCTL_HOSTS", str(tmp_path / "user-hosts.yaml"))
    entries = {"a": {"docker": "ssh://lab@10.0.0.5", "socket": "/run/docker-b/docker.sock"}, "b": {"docker": "local"}}
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": entries}))
    hosts = load_hosts(tmp_path)
    assert hosts.get("a").socket == "/run/docker-b/docker.sock" and hosts.get("b").socket == "/var/run/docker.sock"
    for bad in ("docker.sock", "/run/x.sock\n", "/run/$(id)"):
        (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"a": {"docker": "local", "socket": bad}}}))
        with pytest.raises(BadInput, match="socket"):
            load_hosts(tmp_path)


def test_hosts_add_writes_a_socket_and_refuses_one_that_is_no_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from labctl.host.remote.hosts import add_host

    monkeypatch.setenv("LABCTL_HOSTS", str(tmp_path / "user-hosts.yaml"))
    add_host("gpu-b", "ssh://lab@10.0.0.6", ["nvidia-smi"], "/run/docker-b.sock")
    assert load_hosts(tmp_path).get("gpu-b").socket == "/run/docker-b.sock"
    with pytest.raises(BadInput, match="--socket 'run/x.sock'"):
        add_host("gpu-c", "ssh://lab@10.0.0.7", ["nvidia-smi"], "run/x.sock")
