"""The record's endpoint is what the engine binds: after `up` has the engine ready, labctl reads the listening
sockets of the engine's network namespace, and an engine that listens beyond the recorded address is taken
down and recorded as failed. The harness is made to bind 0.0.0.0 by its engine file in this test's lab copy
(the way an engine that ignores what labctl renders would), never by a profile: extra_args may not."""

from __future__ import annotations

import json
import random
import socket
from pathlib import Path

import pytest
from helpers.lifecycle_helpers import containers_of, record, up, write_profile

pytestmark = pytest.mark.docker


def free_port_in_range() -> int:
    """A free port in 44000-44999 (this test's share of the machine)."""
    for port in random.sample(range(44000, 45000), 1000):
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 44000-44999")


def test_an_engine_listening_on_every_interface_while_the_record_says_loopback_is_taken_down(
    lab: Path, home: Path
) -> None:
    engine = lab / "engines" / "harness" / "engine.yaml"
    engine.write_text(engine.read_text().replace('["--host", "{host}"]', '["--host", "0.0.0.0"]'))
    port = free_port_in_range()
    write_profile(lab, "wide", port)
    result = up(lab, home, "wide")
    assert result.code == 1, result
    assert f"the engine listens on 0.0.0.0:{port}, but this run's record says 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
    (run_dir,) = (home / "runs").iterdir()
    rec = record(home, run_dir.name)
    assert rec["status"] == "failed" and f"0.0.0.0:{port}" in rec["reason"]
    assert containers_of(run_dir.name) == []
    with socket.socket() as probe:  # the port is free again: nothing kept listening
        probe.bind(("0.0.0.0", port))


def test_an_engine_that_binds_what_was_rendered_passes_the_check(lab: Path, home: Path) -> None:
    port = free_port_in_range()
    write_profile(lab, "narrow", port)
    result = up(lab, home, "narrow")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["base_url"] == f"http://127.0.0.1:{port}/v1"
