"""The client's own honesty flags hold when the client is the bottleneck: a bench whose core is taken by other
processes on purpose (two busy loops pinned beside it, the client niced below them) says its event loop woke late, by how much, and that
every time it took can be that late. Its CPU share alone would not say so: a starved client uses little CPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.harness_proc import harness
from helpers.support import LABCTL

from labctl.bench.runner import LOOP_LATE_MS, LevelOutcome

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, busy loops


# Exclusive: alone at the end of make test, so that the busy loops on core 0 slow no other tier's test.
@pytest.mark.exclusive
@pytest.mark.parametrize("workers", [1, 2])
def test_a_client_starved_of_its_core_says_its_timestamps_are_late(lab: Path, tmp_path: Path, workers: int) -> None:
    """One client process, or two sharing the streams (both on the starved core: taskset is inherited)."""
    if shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        pytest.skip("SKIPPED LOUDLY: needs taskset and two cores (one for the starved client)")
    pin = ["taskset", "-c", "0"]
    hogs = [subprocess.Popen([*pin, sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        with harness("--ttft-ms", "5", "--tpot-ms", "5", model="m") as (base, _):
            ran = subprocess.run(
                ["nice", "-n", "10", *pin, *LABCTL, "bench", "run", "--base-url", f"{base}/v1", "--model", "m"]
                + ["--workload", "chat-sweep", "--concurrency", "8", "--requests", "40", "--output-len", "16"]
                + ["--input-len", "8", "--no-telemetry", "--json", "--client-workers", str(workers)],
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(tmp_path / "h")},
            )
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert ran.returncode == 0, ran.stderr
    level = json.loads(ran.stdout)["levels"][0]
    assert level["loop_late_p99_ms"] > LOOP_LATE_MS and level["loop_late_max_ms"] >= level["loop_late_p99_ms"]
    [late] = [w for w in level["warnings"] if w.startswith("CLIENT LATE")]
    assert f"{level['loop_late_p99_ms']:.1f} ms late at p99" in late and "of a core" in late
    assert level["client_workers"] == workers and (workers == 1) == late.startswith("CLIENT LATE: its event loop")


def test_the_late_flag_follows_the_probe_not_the_cpu_share() -> None:
    quiet = LevelOutcome(1, [], 10.0, 1.0, None, loop_late_p99_ms=0.4, loop_late_max_ms=2.0)
    starved = LevelOutcome(1, [], 10.0, 1.0, None, loop_late_p99_ms=31.0, loop_late_max_ms=80.0)
    assert not any(w.startswith("CLIENT") for w in quiet.summary(None)["warnings"])
    [late] = [w for w in starved.summary(None)["warnings"] if w.startswith("CLIENT")]
    assert late.startswith("CLIENT LATE: its event loop woke 31.0 ms late at p99 (max 80 ms) with 10% of a core")
    assert quiet.summary(None)["loop_late_p99_ms"] == 0.4
