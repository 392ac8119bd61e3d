"""A placement that is a folder and nothing else: `up`, `status`, `logs` and `down` drive the test-only
local_process kind (the harness engine as a plain process) through the one Backend interface, with no line
of labctl/ changed for it. The labctl below is the real CLI; only the kinds' folder list is longer."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from helpers.harness_proc import free_port
from helpers.support import REPO

EXTRA = Path(__file__).parent / "extra"
# The real CLI, with the tests' folder of kinds beside labctl/run/backends/ (as a new folder there would be).
LAUNCH = "import sys, labctl.run.backends as b; b.__path__.append(sys.argv.pop(1)); from labctl.cli import main; main()"

pytestmark = pytest.mark.process


def labctl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", LAUNCH, str(EXTRA), "--home", str(home), *args]
    env = {**os.environ, "LABCTL_HOSTS": str(home / "no-hosts.yaml")}
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


def test_up_status_logs_and_down_through_a_third_backend(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    up = labctl(home, "up", "harness", "--profile", "smoke", "--host", "process-1", "--port", str(port), "--json")
    assert up.returncode == 0, up.stderr
    started = json.loads(up.stdout)
    run_id, pid = started["run_id"], started["local_process"]["pid"]
    try:
        assert started["host"] == "process-1" and started["base_url"] == f"http://127.0.0.1:{port}/v1"
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200

        listed = labctl(home, "status", "--host", "process-1")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines()[0].split() == ["RUN", "ENGINE/PROFILE", "PID", "BASE", "URL", "HEALTH"]
        assert f"{run_id}  harness/smoke" in listed.stdout and "healthy" in listed.stdout, listed.stdout
        refused = labctl(home, "up", "harness", "--profile", "smoke", "--host", "process-1", "--gpus", "0")
        assert refused.returncode != 0 and "a local process holds no GPU" in refused.stderr, refused.stderr

        logs = labctl(home, "logs", run_id)
        assert logs.returncode == 0 and logs.stdout, logs.stderr

        down = labctl(home, "down", run_id)
        assert down.returncode == 0, down.stderr
        assert down.stdout.strip() == f"stopped {run_id} (harness/smoke): process {pid} ended"
        record = json.loads((home / "runs" / run_id / "record.json").read_text())
        assert record["status"] == "stopped" and record["local_process"] == {"pid": pid} and record["slurm"] is None
        after = labctl(home, "status", "--host", "process-1")
        assert after.stdout.strip() == "no run of this home on process-1", after.stdout
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, 9)
