"""A Docker daemon restart is recorded by the resident run's watcher, with nobody running labctl.

The lab's daemons (main, the simulated GPU hosts, the remote lab) are shared and never restarted here:
the test starts a private dockerd of its own (own socket, data root, exec root and pid file, under a
temp folder), runs a resident harness engine on it, stops that daemon with SIGTERM and starts it again
with the same command line, then removes everything it made. Needs root (it starts dockerd)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.harness_proc import free_port, wait_healthy
from helpers.lifecycle_helpers import IMAGE, write_profile
from helpers.support import IN_CI, run_labctl

pytestmark = pytest.mark.docker


class PrivateDaemon:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        (root / "daemon.json").write_text("{}")
        self.argv = [
            "dockerd",
            "--config-file",
            str(root / "daemon.json"),
            "-H",
            f"unix://{self.socket}",
            "--data-root",
            str(root / "data"),
            "--exec-root",
            str(root / "exec"),
            "--pidfile",
            str(root / "docker.pid"),
            "--bridge=none",
            "--iptables=false",
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": f"unix://{self.socket}"}

    def start(self) -> None:
        with (self.root / "dockerd.log").open("ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 30
        while subprocess.run(["docker", "version"], env=self.env, capture_output=True).returncode != 0:
            assert self.proc.poll() is None, (self.root / "dockerd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the private dockerd did not answer within 30 s"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)


@pytest.fixture
def daemon(docker_engine: None) -> Iterator[PrivateDaemon]:
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        reason = "a private dockerd needs root and dockerd"
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(f"SKIPPED LOUDLY: {reason}")
    root = Path(tempfile.mkdtemp(prefix="labctl-dockerd-", dir="/tmp"))
    private = PrivateDaemon(root)
    try:
        private.start()
        yield private
    finally:
        if private.proc is not None and private.proc.poll() is None:
            ids = subprocess.run(["docker", "ps", "-aq"], env=private.env, capture_output=True, text=True).stdout
            if ids.split():
                subprocess.run(["docker", "rm", "-f", *ids.split()], env=private.env, capture_output=True)
        private.stop()
        unmount_under(root)
        shutil.rmtree(root, ignore_errors=True)


def unmount_under(root: Path) -> None:
    """dockerd leaves its network namespace bound under the exec root after it stops."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for target in sorted((m for m in mounts if m.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", target], capture_output=True)


def test_a_daemon_restart_is_recorded_by_the_watcher(daemon: PrivateDaemon, lab: Path, tmp_path: Path) -> None:
    # The harness image, copied from the main daemon (no registry needed): `docker save | docker load`.
    save = subprocess.Popen(["docker", "save", IMAGE], stdout=subprocess.PIPE)
    loaded = subprocess.run(["docker", "load", "-q"], stdin=save.stdout, env=daemon.env, capture_output=True, text=True)
    assert save.wait() == 0 and loaded.returncode == 0, loaded.stderr
    home = tmp_path / "home"
    env = {
        "DOCKER_HOST": f"unix://{daemon.socket}",
        "LABCTL_HOME": str(home),
        "LABCTL_WATCH_IMAGE": IMAGE,  # any image with python3 runs the watcher; this daemon has only this one
        "LABCTL_LOCK_FILE": str(tmp_path / "gpus.lock"),
    }
    port = free_port()
    write_profile(lab, "daemon", port)
    started = run_labctl(
        "up", "harness", "--profile", "daemon", "--allow-unpinned", "--resident", "--json", lab=lab, env=env
    )
    assert started.code == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    log = home / "runs" / run_id / "events.jsonl"
    deadline = time.monotonic() + 30
    while not (home / "runs" / run_id / "watch-state.json").is_file():  # the watcher has seen this daemon
        assert time.monotonic() < deadline, "the watcher never started"
        time.sleep(0.2)
    daemon.stop()
    daemon.start()
    wait_healthy(f"http://127.0.0.1:{port}", 90)  # unless-stopped: Docker brought the engine back
    deadline = time.monotonic() + 60
    while not (found := [json.loads(x) for x in log.read_text().splitlines() if '"daemon-restart"' in x]):
        assert time.monotonic() < deadline, f"no daemon-restart recorded:\n{log.read_text()}"
        time.sleep(0.3)
    [entry] = found
    assert entry["previous_daemon_started_at"] < entry["daemon_started_at"]
    assert entry["seen_by"] == "labctl-watch"
    shown = run_labctl("show", run_id, lab=lab, env=env)
    assert "last: daemon-restart" in shown.stdout, shown.stderr
    down = run_labctl("down", run_id, lab=lab, env=env)
    assert down.code == 0, down.stderr
    left = subprocess.run(["docker", "ps", "-aq"], env=daemon.env, capture_output=True, text=True).stdout
    assert left.split() == []  # the engine and its watcher are gone
