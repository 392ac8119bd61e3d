"""Every state change survives its own interruption (issue 29, class 10), on a real Docker Engine with the
harness engine. A step is interrupted for real: the command runs in its own process, with the step it
reaches replaced by a SIGKILL of that process (or by the OSError a full disk raises there), so whatever
the command wrote before that step is all there is. The next `status` must finish or undo the job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers.harness_proc import free_port
from helpers.interrupt import FULL_DISK, FULL_DISK_ON_STATUS, KILL, interrupted
from helpers.lifecycle_helpers import containers_of, labctl, record, up, watchers_of, write_profile
from helpers.support import REPO

pytestmark = pytest.mark.docker


def started(lab: Path, home: Path, *args: str) -> dict:
    write_profile(lab, "int", free_port())
    result = up(lab, home, "int", *args)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


def key_of(lab: Path, home: Path, run_id: str) -> str:
    shared = labctl(lab, home, "share", run_id, "--json")
    assert shared.code == 0, shared.stderr
    return json.loads(shared.stdout)["api_key"]


def answers(base: str, key: str | None) -> int:
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(f"{base}/models", headers=headers, timeout=10).status_code


@pytest.mark.parametrize(
    "step",
    [
        "labctl.run.resident.watch:remove",  # right after `stopping` was written
        "labctl.host.docker.daemon:compose_down",  # logs saved, the engine still up
        "labctl.run.lifecycle.down:finish_stop",  # the engine gone, keys and record not yet
    ],
)
def test_a_down_killed_at_any_step_is_finished_by_the_next_status(lab: Path, home: Path, step: str) -> None:
    info = started(lab, home, "--resident")
    run_id = info["run_id"]
    killed = interrupted(lab, home, step, KILL, "down", run_id)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert record(home, run_id)["status"] == "stopping"  # the intent, never `stopped` while it still serves
    status = labctl(lab, home, "status")
    assert status.code == 0, status.stderr
    assert f"finished stopping {run_id}" in status.stderr, status.stderr
    after = record(home, run_id)
    assert after["status"] == "stopped" and after["stopped_by"] and after.get("down_process") is None
    assert containers_of(run_id) == [] and watchers_of(run_id) == []
    assert not (home / ".state" / "keys" / run_id).exists(), "a stopped deployment's key must open nothing"


def test_a_down_whose_logs_cannot_be_saved_still_frees_the_gpu(lab: Path, home: Path) -> None:
    info = started(lab, home)
    run_id = info["run_id"]
    done = interrupted(lab, home, "labctl.run.lifecycle.down:write_atomically", FULL_DISK, "down", run_id)
    assert done.returncode == 1 and f"stopped {run_id}" in done.stdout, done.stderr  # stopped, said what was lost
    assert "logs were not saved" in done.stderr and "No space left on device" in done.stderr, done.stderr
    assert containers_of(run_id) == [] and record(home, run_id)["status"] == "stopped"


def test_a_full_disk_while_up_records_takes_the_engine_down_and_status_never_adopts_it(lab: Path, home: Path) -> None:
    write_profile(lab, "disk", free_port())
    # The record cannot say `starting` (the disk is full): up must take its engine down all the same.
    failed = interrupted(
        lab, home, "labctl.run.lifecycle.up:Starter.update", FULL_DISK_ON_STATUS,
        "up", "harness", "--profile", "disk", "--allow-unpinned", "--resident",
    )  # fmt: skip
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    run_ids = [p.name for p in (home / "runs").iterdir()]
    assert len(run_ids) == 1
    assert (home / "runs" / run_ids[0] / "serve.log").is_file(), "the engine had started (its logs were saved)"
    assert containers_of(run_ids[0]) == [] and watchers_of(run_ids[0]) == []
    status = labctl(lab, home, "status", "--json")
    assert status.code == 0, status.stderr
    # status lists every home's runs on this daemon (other tiers' too): only this home's must be none
    assert [r for r in json.loads(status.stdout) if r["home"] == str(home)] == [], status.stdout
    assert record(home, run_ids[0])["status"] in ("failed", "aborted")


def test_a_rotation_killed_after_the_restart_is_finished_and_before_it_undone(lab: Path, home: Path) -> None:
    info = started(lab, home, "--resident")
    run_id, base = info["run_id"], info["base_url"]
    old = key_of(lab, home, run_id)
    fingerprints = record(home, run_id)["resident"]["key_fingerprints"]

    # Killed before the engine restarted: it still runs with the old key, which must stay the shared one.
    killed = interrupted(lab, home, "labctl.host.docker.daemon:restart", KILL, "rotate-key", run_id)
    assert killed.returncode == -signal.SIGKILL
    assert record(home, run_id)["resident"]["rotating_since"]
    refused = labctl(lab, home, "share", run_id, "--json")
    assert refused.code == 1 and "interrupted" in refused.stderr  # never a key the engine rejects
    status = labctl(lab, home, "status")
    assert f"undid the interrupted key rotation of run {run_id}" in status.stderr, status.stderr
    assert key_of(lab, home, run_id) == old and answers(base, old) == 200
    assert record(home, run_id)["resident"]["key_fingerprints"] == fingerprints

    # Killed once the engine restarted with the new key, before the record said so: finished, not undone.
    killed = interrupted(lab, home, "labctl.run.resident.rotation:wait_until_ready", KILL, "rotate-key", run_id)
    assert killed.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = labctl(lab, home, "status")
        if f"finished the key rotation of run {run_id}" in status.stderr:
            break
        time.sleep(0.5)  # the engine is still coming back up with its new key
    assert f"finished the key rotation of run {run_id}" in status.stderr, status.stderr
    new = key_of(lab, home, run_id)
    assert new != old and answers(base, new) == 200 and answers(base, old) == 401 and answers(base, None) == 401
    rec = record(home, run_id)["resident"]
    assert rec["key_fingerprints"] != fingerprints and not rec.get("rotating_since")
    assert not (home / ".state" / "keys" / run_id / "api_key.previous").exists()


def test_a_bare_down_never_stops_another_homes_engine(lab: Path, home: Path, tmp_path: Path) -> None:
    info = started(lab, home)
    elsewhere = tmp_path / "other-home"
    refused = labctl(lab, elsewhere, "down")
    assert refused.code == 2 and "none of your runs in this home" in refused.stderr, refused.stderr
    assert info["run_id"] in refused.stderr  # it says what is up, and how to name it
    assert containers_of(info["run_id"]) and record(home, info["run_id"])["status"] == "running"
    assert labctl(lab, home, "down").code == 0  # the owner's own bare down still works
    assert containers_of(info["run_id"]) == []


def test_status_starts_a_missing_watcher_and_records_an_engine_docker_will_not_restart(lab: Path, home: Path) -> None:
    info = started(lab, home, "--resident")
    run_id = info["run_id"]
    subprocess.run(["docker", "rm", "-f", *watchers_of(run_id)], capture_output=True, check=True)
    shown = labctl(lab, home, "show", run_id)
    assert "not running" in shown.stdout, shown.stdout  # show never names a watcher that is gone as if it ran
    status = labctl(lab, home, "status")
    assert f"started the restart watcher of run {run_id}" in status.stderr, status.stderr
    assert len(watchers_of(run_id)) == 1

    serve = containers_of(run_id)[0]
    subprocess.run(["docker", "kill", serve], capture_output=True, check=True)
    status = labctl(lab, home, "status")
    assert "Docker will not restart it" in status.stderr and f"labctl down {run_id}" in status.stderr, status.stderr
    # what Docker knows (docker kill: SIGKILL, exit 137), never a guess at who stopped it
    assert "Docker says: exit code 137 (SIGKILL), not OOMKilled, at " in status.stderr, status.stderr
    assert "docker stop or docker kill" not in status.stderr
    assert record(home, run_id)["status"] == "exited"
    events = (home / "runs" / run_id / "events.jsonl").read_text()
    assert '"event": "engine exited"' in events
    assert labctl(lab, home, "down", run_id).code == 0 and containers_of(run_id) == []


def test_a_killed_bench_controller_stops_its_client_container(lab: Path) -> None:
    """The bench client on a host stops when its controller goes: here the controller is SIGKILLed while
    its client waits on an engine that accepts connections and never answers (a level of minutes)."""
    import socket

    name = f"labctl-lifeline-{os.getpid()}"
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # accepts (the kernel does), never answers
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from labctl.bench.client import Target
        from labctl.bench.level_job import LevelJob
        from labctl.bench.prompt_slots import level_prompts, slots_for
        from labctl.bench.workloads import load_workload
        from labctl.catalog.lab import Lab
        from labctl.host.remote.client_container import client_image, run_job
        from labctl.catalog.hosts_file import LOCAL_HOST
        from labctl.host.remote.hosts import endpoint_url
        workload = load_workload(Lab(Path({str(lab)!r})), "latency-probe")
        job = LevelJob(Target("http://127.0.0.1:{silent.getsockname()[1]}/v1", "m"), workload, 2, 0, 0,
                       level_prompts(workload, 0, slots_for(workload)), 600.0, 600.0)
        for line in run_job(endpoint_url(LOCAL_HOST), client_image(), {name!r}, "labctl.bench.bench_job",
                            job.encode(), 900):
            print(line, flush=True)
        """
    )
    controller = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert controller.stdout is not None
        first = controller.stdout.readline()  # the client said hello: it has its job and is sending it
        assert '"event": "client"' in first, first
        assert _running(name)
        controller.send_signal(signal.SIGKILL)
        controller.wait(10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _exists(name):
            time.sleep(0.2)
        assert not _exists(name), "the bench client outlived its controller"
    finally:
        controller.kill()
        silent.close()
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def _running(name: str) -> bool:
    out = subprocess.run(["docker", "ps", "-q", "--filter", f"name=^{name}$"], capture_output=True, text=True)
    return bool(out.stdout.strip())


def _exists(name: str) -> bool:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"name=^{name}$"], capture_output=True, text=True)
    return bool(out.stdout.strip())


def test_status_that_cannot_record_what_it_found_says_so_and_exits_1(lab: Path, home: Path) -> None:
    info = started(lab, home)
    run_id = info["run_id"]
    subprocess.run(["docker", "kill", containers_of(run_id)[0]], capture_output=True, check=True)
    full = interrupted(lab, home, "labctl.run.records.store:write_atomically", FULL_DISK, "status")
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr
    said = f"run {run_id}: status found its record out of date but could not record it (No space left on device"
    assert said in full.stderr and "the record still says running" in full.stderr, full.stderr
    assert "Docker will not restart it" not in full.stderr  # never a note that claims it was recorded
    assert record(home, run_id)["status"] == "running"
    again = labctl(lab, home, "status")  # room again: recorded now
    assert again.code == 0 and "Docker will not restart it" in again.stderr, again.stderr
    assert record(home, run_id)["status"] == "exited"
    assert labctl(lab, home, "down", run_id).code == 0
