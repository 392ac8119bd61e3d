"""Resident deployments record their own restarts, with nobody running labctl: the watcher beside each
engine follows Docker's events (real Docker Engine, the harness engine). Also: a hung engine (its process
alive, stopped with SIGSTOP, its health failing) is restarted and recorded; `down` and a SIGKILLed `up`
leave no watcher behind; `status` replays restarts no watcher saw, without counting one twice; resident
engines rotate their logs. The Docker daemon itself is never restarted here (it is shared)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from helpers.harness_proc import free_port, wait_healthy
from helpers.lifecycle_helpers import containers_of, labctl, record, up, watchers_of, write_profile
from helpers.support import LABCTL, REPO

pytestmark = pytest.mark.docker

INTERVAL_S = 0.5
FAILURES = 3


@pytest.fixture
def fast_lab(lab: Path) -> Path:
    """The lab copy with a quick health watch: probes 0.5 s apart, hung after 3 failures."""
    path = lab / "engines" / "harness" / "engine.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["readiness"].update(watch_interval_s=INTERVAL_S, hung_after_failures=FAILURES, probe_timeout_s=1)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return lab


def start(lab: Path, home: Path, *extra: str) -> tuple[str, str]:
    port = free_port()
    write_profile(lab, "watched", port, extra=list(extra))
    result = up(lab, home, "watched", "--resident")
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)["run_id"], f"http://127.0.0.1:{port}"


def events(home: Path, run_id: str) -> list[dict]:
    path = home / "runs" / run_id / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def wait_for(check: Callable[[], list[dict]], seconds: float = 30) -> list[dict]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail("not recorded in time")


def restarts(home: Path, run_id: str, kind: str = "restart") -> list[dict]:
    return [e for e in events(home, run_id) if e["event"] == kind]


def engine_pid(run_id: str) -> int:
    serve = containers_of(run_id)[0]
    out = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", serve], capture_output=True, text=True)
    return int(out.stdout.strip())


def kill_and_wait_for_restart(run_id: str, url: str) -> None:
    """SIGKILL the engine, then wait until Docker has started it again and it answers."""
    old = engine_pid(run_id)
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while engine_pid(run_id) in (old, 0):
        assert time.monotonic() < deadline, "Docker did not restart the engine"
        time.sleep(0.1)
    wait_healthy(url)


def test_a_killed_engine_is_recorded_with_nobody_running_labctl(fast_lab: Path, home: Path) -> None:
    run_id, url = start(fast_lab, home)
    assert watchers_of(run_id), "a resident run has a watcher"
    assert record(home, run_id)["resident"]["watcher"] == f"labctl-watch-{run_id}"
    # SIGTERM inside the container: the harness stops cleanly, exit code 0, and Docker starts it again.
    subprocess.run(["docker", "exec", containers_of(run_id)[0], "sh", "-c", "kill -TERM 1"], check=True)
    first = wait_for(lambda: restarts(home, run_id))
    assert first[0]["exit_code"] == 0 and first[0]["oom_killed"] is False and first[0]["seen_by"] == "labctl-watch"
    wait_healthy(url)
    os.kill(engine_pid(run_id), signal.SIGKILL)
    both = wait_for(lambda: [e for e in restarts(home, run_id) if e["exit_code"] == 128 + signal.SIGKILL])
    assert both[0]["died_at"] <= both[0]["at"]
    wait_healthy(url)
    # status and show display what was recorded, and replaying Docker's events adds no duplicate.
    status = json.loads(labctl(fast_lab, home, "status", "--json").stdout)
    mine = next(s for s in status if s["run_id"] == run_id)
    killed = 128 + signal.SIGKILL
    assert mine["restarts_recorded"] == 2 and f"exit code {killed}" in mine["last_restart"]
    shown = labctl(fast_lab, home, "show", run_id).stdout
    assert f"2 (last: restart at {both[0]['at']}, exit code {killed})" in shown
    assert len(restarts(home, run_id)) == 2


def test_an_oom_killed_engine_is_recorded_as_such(fast_lab: Path, home: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("SKIPPED LOUDLY: steering the kernel's OOM killer at the engine needs root")
    run_id, url = start(fast_lab, home)
    serve = containers_of(run_id)[0]
    # A memory limit on the running container, the engine made the OOM killer's first choice, and a process
    # in the container that needs more than the limit: the kernel kills the engine, as it would a real one.
    subprocess.run(["docker", "update", "--memory", "40m", "--memory-swap", "40m", serve], check=True)
    Path(f"/proc/{engine_pid(run_id)}/oom_score_adj").write_text("1000")
    grow = "import time\nb = []\nfor _ in range(80):\n    b.append(bytearray(1 << 20)); time.sleep(0.005)"
    subprocess.run(["docker", "exec", serve, "python3", "-c", grow], capture_output=True)
    [entry] = wait_for(lambda: restarts(home, run_id))
    inspect = subprocess.run(["docker", "inspect", "-f", "{{.State.OOMKilled}}", serve], capture_output=True, text=True)
    assert inspect.stdout.strip() == "true"  # Docker's own word
    assert entry["oom_killed"] is True and entry["exit_code"] == 128 + signal.SIGKILL
    assert "OOM killer" in entry["cause"]
    wait_healthy(url)


def test_a_hung_engine_is_restarted_and_recorded(fast_lab: Path, home: Path) -> None:
    run_id, url = start(fast_lab, home)
    os.kill(engine_pid(run_id), signal.SIGSTOP)  # alive, answering nothing: hung
    hung = wait_for(lambda: restarts(home, run_id, "hung-restart"), seconds=60)
    assert f"/health failed {FAILURES} times in a row" in hung[0]["reason"]
    assert hung[0]["exit_code"] == 128 + signal.SIGKILL  # a stopped process ignores SIGTERM: Docker killed it
    wait_healthy(url)
    assert restarts(home, run_id) == []  # its own restart is not counted twice
    shown = labctl(fast_lab, home, "show", run_id).stdout
    assert "restarts           1 (last: hung-restart" in shown


def test_down_leaves_no_watcher(fast_lab: Path, home: Path) -> None:
    run_id, _ = start(fast_lab, home)
    assert watchers_of(run_id)
    done = labctl(fast_lab, home, "down", run_id)
    assert done.code == 0, done.stderr
    assert watchers_of(run_id) == [] and containers_of(run_id) == []
    assert restarts(home, run_id) == [] and restarts(home, run_id, "hung-restart") == []


def test_a_watcher_whose_engine_was_removed_by_hand_removes_itself(fast_lab: Path, home: Path) -> None:
    run_id, _ = start(fast_lab, home)
    subprocess.run(["docker", "rm", "-f", *containers_of(run_id)], check=True, capture_output=True)
    deadline = time.monotonic() + 20
    while watchers_of(run_id):
        assert time.monotonic() < deadline, "the watcher outlived its engine"
        time.sleep(0.2)


def test_a_sigkilled_up_leaves_no_orphan_watcher_after_status(fast_lab: Path, home: Path) -> None:
    write_profile(fast_lab, "never", free_port(), extra=["--never-ready"])
    env = {**os.environ, "LABCTL_LAB": str(fast_lab), "LABCTL_HOME": str(home)}
    argv = [*LABCTL, "up", "harness", "--profile", "never", "--allow-unpinned", "--resident", "--timeout", "120"]
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        run_id = ""
        while not run_id or not watchers_of(run_id):
            assert time.monotonic() < deadline, "up never started a watcher"
            run_dirs = list((home / "runs").glob("*/record.json")) if (home / "runs").is_dir() else []
            run_id = run_dirs[0].parent.name if run_dirs else ""
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    assert watchers_of(run_id)
    result = labctl(fast_lab, home, "status")
    assert result.code == 0, result.stderr
    assert watchers_of(run_id) == [] and containers_of(run_id) == []
    assert record(home, run_id)["status"] == "aborted"


def test_a_watcher_started_again_catches_up_and_status_restarts_a_stopped_one(fast_lab: Path, home: Path) -> None:
    run_id, url = start(fast_lab, home)
    [watcher] = watchers_of(run_id)
    deadline = time.monotonic() + 10
    while not (home / "runs" / run_id / "watch-state.json").is_file():
        assert time.monotonic() < deadline, "the watcher never started"
        time.sleep(0.1)
    subprocess.run(["docker", "stop", "-t", "1", watcher], check=True, capture_output=True)
    kill_and_wait_for_restart(run_id, url)
    assert restarts(home, run_id) == []
    subprocess.run(["docker", "start", watcher], check=True, capture_output=True)
    [caught_up] = wait_for(lambda: restarts(home, run_id))  # replayed from Docker's events since it last ran
    assert caught_up["seen_by"] == "labctl-watch" and caught_up["exit_code"] == 128 + signal.SIGKILL
    subprocess.run(["docker", "stop", "-t", "1", watcher], check=True, capture_output=True)
    result = labctl(fast_lab, home, "status")
    assert f"started the restart watcher of run {run_id} again" in result.stderr
    running = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", watcher], capture_output=True, text=True)
    assert running.stdout.strip() == "true"
    time.sleep(2)  # a negative: nothing more may be recorded in the time a watcher takes to record (~0.4 s)
    assert len(restarts(home, run_id)) == 1  # neither the watcher nor status counted it twice


def test_status_replays_restarts_no_watcher_saw(fast_lab: Path, home: Path) -> None:
    run_id, url = start(fast_lab, home)
    subprocess.run(["docker", "rm", "-f", *watchers_of(run_id)], check=True, capture_output=True)
    kill_and_wait_for_restart(run_id, url)
    assert restarts(home, run_id) == []  # nobody watched
    assert labctl(fast_lab, home, "status").code == 0
    replayed = restarts(home, run_id)
    assert [(e["exit_code"], e["seen_by"]) for e in replayed] == [(128 + signal.SIGKILL, "labctl status")]
    assert labctl(fast_lab, home, "status").code == 0
    assert len(restarts(home, run_id)) == 1  # de-duplicated by Docker's event time
    # ...and the orphan rule leaves a live run alone: no watcher was removed or recreated by status.
    assert containers_of(run_id)


def test_resident_engine_logs_rotate(fast_lab: Path, home: Path) -> None:
    run_id, _ = start(fast_lab, home)
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{json .HostConfig.LogConfig}}", containers_of(run_id)[0]],
        capture_output=True,
        text=True,
    )
    config = json.loads(out.stdout)
    assert config["Type"] == "json-file"
    assert config["Config"] == {"max-size": "50m", "max-file": "5"}
    rendered = yaml.safe_load((home / "runs" / run_id / "compose.yaml").read_text())
    assert rendered["services"]["serve"]["logging"]["options"] == config["Config"]  # what the file says ran


def test_watcher_image_missing_is_a_warning_and_status_still_records(
    fast_lab: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LABCTL_WATCH_IMAGE", "127.0.0.1:5000/labctl/no-such-watcher:none")
    port = free_port()
    write_profile(fast_lab, "nowatch", port)
    result = up(fast_lab, home, "nowatch", "--resident")
    assert result.code == 0, result.stderr
    run_id = json.loads(result.stdout)["run_id"]
    assert "no restart watcher (127.0.0.1:5000/labctl/no-such-watcher:none is not on this host)" in result.stderr
    assert watchers_of(run_id) == [] and record(home, run_id)["resident"]["watcher"] == ""
    kill_and_wait_for_restart(run_id, f"http://127.0.0.1:{port}")
    assert labctl(fast_lab, home, "status").code == 0
    assert [e["exit_code"] for e in restarts(home, run_id)] == [128 + signal.SIGKILL]
