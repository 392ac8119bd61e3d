"""The restart watcher's pure parts: Docker events (in the Engine API's own shape, as `docker events
--format '{{json .}}'` prints them) become restart entries; the events log takes each Docker event time
once; the watch settings in engine.yaml are bounded."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.support import REPO

from labctl.catalog.engines import load_engine
from labctl.catalog.lab import Lab
from labctl.errors import BadInput
from labctl.host.watcher.program import append_new, moment, restart_entries

T0 = 1_796_301_785_000_000_000


def event(action: str, at_s: float, service: str = "serve", **attrs: str) -> dict:
    labels = {"com.docker.compose.service": service, "labctl.run_id": "20261203-124257-452def", **attrs}
    return {
        "status": action,
        "Type": "container",
        "Action": action,
        "Actor": {"ID": "1100e50c9fa7", "Attributes": labels},
        "time": int((T0 + at_s * 1e9) // 1e9),
        "timeNano": int(T0 + at_s * 1e9),
    }


def test_a_die_then_start_is_one_restart_with_its_exit_code() -> None:
    events = [event("start", 0), event("die", 5, exitCode="137"), event("start", 5.2)]
    [entry] = restart_entries(events, "labctl-watch")
    assert entry["exit_code"] == 137 and entry["oom_killed"] is False
    assert entry["docker_time_nano"] == events[2]["timeNano"]
    assert moment(entry["died_at"]) < moment(entry["at"])
    assert "restart policy" in entry["cause"]


def test_oom_and_docker_api_stops_are_said() -> None:
    oom = restart_entries([event("oom", 1), event("die", 1.1, exitCode="137"), event("start", 2)], "x")
    assert oom[0]["oom_killed"] is True
    other = restart_entries([event("oom", 1), event("die", 60, exitCode="1"), event("start", 61)], "x")
    assert other[0]["oom_killed"] is False  # an exec'd process was OOM-killed a minute before, not the engine
    api = [event("kill", 1, signal="15"), event("die", 1.5, exitCode="0"), event("stop", 1.6), event("start", 2)]
    assert restart_entries(api, "x")[0]["cause"].startswith("stopped through the Docker API (kill, signal 15")
    # `restart` follows the start it caused: the next crash is the restart policy's again
    later = [*api, event("restart", 2.1), event("die", 9, exitCode="1"), event("start", 9.5)]
    assert "restart policy" in restart_entries(later, "x")[1]["cause"]


def test_the_build_service_exec_events_and_a_lone_start_are_no_restart() -> None:
    events = [
        event("die", 1, service="build", exitCode="0"),
        event("start", 2),
        event("exec_die", 3),
        event("die", 4, exitCode="1"),
    ]
    assert restart_entries(events, "x") == []  # the last die has no start yet: not (yet) a restart


def test_the_events_log_takes_each_docker_event_time_once(tmp_path: Path) -> None:
    entries = restart_entries([event("die", 1, exitCode="1"), event("start", 2)], "labctl-watch")
    assert append_new(tmp_path, entries) == 1
    replayed = restart_entries([event("die", 1, exitCode="1"), event("start", 2)], "labctl status")
    assert append_new(tmp_path, replayed) == 0
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["seen_by"] for e in lines] == ["labctl-watch"]


@pytest.mark.parametrize(
    ("field", "value"), [("watch_interval_s", 0), ("watch_interval_s", 1e9), ("hung_after_failures", 0)]
)
def test_watch_settings_are_bounded(tmp_path: Path, field: str, value: float) -> None:
    root = tmp_path / "lab"
    (root / "engines" / "harness").mkdir(parents=True)
    (root / "templates").mkdir()
    spec = yaml.safe_load((REPO / "engines" / "harness" / "engine.yaml").read_text())
    spec["readiness"][field] = value
    (root / "engines" / "harness" / "engine.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(BadInput, match=field):
        load_engine(Lab(root), "harness")


def test_watch_settings_have_defaults() -> None:
    readiness = load_engine(Lab(REPO), "harness").readiness
    assert readiness.hung_after_failures >= 1 and readiness.watch_interval_s > 0


@pytest.mark.process
def test_the_watcher_runs_alone_from_a_copy(tmp_path: Path) -> None:
    """It is copied into the run's folder and run by any python3: the standard library must be enough."""
    copy = tmp_path / "watcher.py"
    shutil.copyfile(REPO / "labctl" / "host" / "watcher" / "program.py", copy)
    proc = subprocess.run([sys.executable, "-I", str(copy), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and "--probe-url" in proc.stdout, proc.stderr
