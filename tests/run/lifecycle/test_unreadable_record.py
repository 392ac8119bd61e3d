"""One corrupt record never blinds the host: with a running engine's record.json truncated (or replaced
by a list), `status` and `status --json` still list every engine, naming the bad record on its own line
and exiting 1; `down RUN`, `down ENGINE --all` and `up --replace` still stop its containers, found by
their `labctl.run_id` label, and say what they could not record. Real harness containers on Docker."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from helpers.lifecycle_helpers import containers_of, labctl, up, write_profile

pytestmark = pytest.mark.docker


def ports(count: int) -> list[int]:
    found = []
    for port in range(46200, 46999):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise RuntimeError("no free ports in 46200-46999")


def start(lab: Path, home: Path, count: int) -> list[str]:
    ids = []
    for index, port in enumerate(ports(count)):
        write_profile(lab, f"shape{index}", port)
        done = up(lab, home, f"shape{index}")
        assert done.code == 0, done.stderr
        ids.append(json.loads(done.stdout.strip().splitlines()[-1])["run_id"])
    return ids


def spoil(home: Path, run_id: str, how: str) -> Path:
    path = home / "runs" / run_id / "record.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 3] if how == "truncated" else json.dumps([text[:20]]))
    return path


@pytest.mark.parametrize("how", ["truncated", "a list"])
def test_status_lists_every_engine_when_one_record_is_unreadable(lab: Path, home: Path, how: str) -> None:
    ids = start(lab, home, 3)
    path = spoil(home, ids[1], how)
    listed = labctl(lab, home, "status", "--json")
    assert listed.code == 1, listed.stderr
    runs = {r["run_id"]: r for r in json.loads(listed.stdout) if r["run_id"] in ids}
    assert sorted(runs) == sorted(ids)
    assert runs[ids[1]]["record_problem"] and runs[ids[0]]["record_problem"] is None
    assert runs[ids[1]]["engine"] == "harness" and runs[ids[1]]["health"] == "healthy"
    said = [line for line in listed.stderr.splitlines() if ids[1] in line]
    assert len(said) == 1 and str(path) in said[0] and "Traceback" not in listed.stderr, listed.stderr
    table = labctl(lab, home, "status")
    assert table.code == 1 and all(run_id in table.stdout for run_id in ids), table.stdout + table.stderr


def test_down_stops_a_run_whose_record_is_truncated_and_says_what_it_could_not_record(lab: Path, home: Path) -> None:
    ids = start(lab, home, 2)
    path = spoil(home, ids[0], "truncated")
    stopped = labctl(lab, home, "down", ids[0])
    assert stopped.code == 1, stopped.stderr
    assert f"stopped {ids[0]}" in stopped.stdout and containers_of(ids[0]) == []
    assert "could not record it" in stopped.stderr and str(path) in stopped.stderr
    assert "Traceback" not in stopped.stderr and containers_of(ids[1]) != []
    events = (home / "runs" / ids[0] / "events.jsonl").read_text()
    assert '"event": "down"' in events  # the events log still says who stopped it


def test_down_all_stops_every_run_of_the_engine_even_with_an_unreadable_record(lab: Path, home: Path) -> None:
    ids = start(lab, home, 2)
    spoil(home, ids[1], "a list")
    stopped = labctl(lab, home, "down", "harness", "--all")
    assert stopped.code == 1, stopped.stderr
    assert all(f"stopped {run_id}" in stopped.stdout for run_id in ids), stopped.stdout
    assert [containers_of(run_id) for run_id in ids] == [[], []]
    assert json.loads((home / "runs" / ids[0] / "record.json").read_text())["status"] == "stopped"


def test_up_replace_takes_the_port_of_a_run_whose_record_is_truncated(lab: Path, home: Path) -> None:
    (old,) = start(lab, home, 1)
    spoil(home, old, "truncated")
    port = yaml.safe_load((lab / "engines" / "harness" / "profiles" / "shape0.yaml").read_text())["port"]
    write_profile(lab, "shape-next", port)
    replaced = up(lab, home, "shape-next", "--replace")
    assert replaced.code == 0, replaced.stderr
    assert containers_of(old) == [] and "could not record it" in replaced.stderr
    new = json.loads(replaced.stdout.strip().splitlines()[-1])["run_id"]
    assert containers_of(new) != []
    assert labctl(lab, home, "down", new).code == 0
