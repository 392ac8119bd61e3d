"""Interrupted state changes on the remote lab host `labb` (`make remote-lab`): a `down` SIGKILLed midway and
a key rotation SIGKILLed before the engine restarted are finished or undone by the next `status`, with the
host's claims, the key volume and the SSH forward accounted for. Only loopback and 10.201.0.2 are used."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from helpers.interrupt import KILL, interrupted
from helpers.lifecycle_helpers import write_profile
from helpers.support import (
    Result,
    free_labb_port,
    labb_entry,
    remote_docker,
    remote_names,
    remove_labb_runs,
    run_labctl,
)

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


def env(home: Path) -> dict[str, str]:
    return {"LABCTL_HOME": str(home), "LABCTL_LOCK_FILE": str(home / "gpus.lock")}


def labctl(lab: Path, home: Path, *args: str) -> Result:
    return run_labctl(*args, lab=lab, env=env(home), timeout=180)


def up_resident(lab: Path, home: Path) -> dict:
    port = free_labb_port()
    write_profile(lab, "res", port)
    result = labctl(lab, home, "up", "harness", "--profile", "res", "--allow-unpinned", "--host", "labb", "--json",
                    "--resident")  # fmt: skip
    assert result.code == 0, result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def record(home: Path, run_id: str) -> dict:
    return json.loads((home / "runs" / run_id / "record.json").read_text())


def test_a_down_killed_on_labb_is_finished_by_status_claims_volume_and_forward_included(lab: Path, home: Path) -> None:
    info = up_resident(lab, home)
    run_id = info["run_id"]
    forward_pid = int(record(home, run_id)["forward"]["process"].split(":")[0])
    killed = interrupted(lab, home, "labctl.host.docker.daemon:compose_down", KILL, "down", run_id, env=env(home))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert record(home, run_id)["status"] == "stopping"
    assert remote_names(f"labctl.run_id={run_id}"), "the engine still ran when down was killed"
    status = labctl(lab, home, "status")
    assert f"finished stopping {run_id}" in status.stderr, status.stderr
    assert record(home, run_id)["status"] == "stopped"
    assert remote_names(f"labctl.run_id={run_id}") == []
    assert not [n for n in remote_docker("ps", "-a", "--format", "{{.Names}}").stdout.split() if run_id in n]
    assert run_id not in remote_docker("volume", "ls", "--format", "{{.Name}}").stdout
    assert not Path(f"/proc/{forward_pid}").exists() or "ssh" not in Path(f"/proc/{forward_pid}/cmdline").read_text()


def test_a_rotation_killed_on_labb_before_the_restart_is_undone_so_a_restart_keeps_the_working_key(
    lab: Path, home: Path
) -> None:
    info = up_resident(lab, home)
    run_id, base = info["run_id"], info["base_url"]
    old = json.loads(labctl(lab, home, "share", run_id, "--json").stdout)["api_key"]
    killed = interrupted(lab, home, "labctl.host.docker.daemon:restart", KILL, "rotate-key", run_id, env=env(home))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    status = labctl(lab, home, "status")
    assert f"undid the interrupted key rotation of run {run_id}" in status.stderr, status.stderr
    assert json.loads(labctl(lab, home, "share", run_id, "--json").stdout)["api_key"] == old
    # The key volume on labb says the old key again: a restart of the engine there keeps the key that works.
    serve = remote_names(f"labctl.run_id={run_id}")[0]
    assert remote_docker("restart", serve, timeout=120).returncode == 0
    headers = {"Authorization": f"Bearer {old}"}
    for _ in range(120):
        try:
            if httpx.get(f"{base}/models", headers=headers, timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)  # the engine is coming back up
    assert httpx.get(f"{base}/models", headers=headers, timeout=5).status_code == 200
