"""A user of their own on the simulated GPU lab (make sim-lab): home, settings and data folders in tmp, the
simulated hosts in their hosts file (each host's nvidia-smi reading a config of the test's own), and a lab
made by `labctl init` whose engine images are the engines' personas by tag, unpinned, as the shipped profiles
name the real images. What the user then types runs as typed; containers the test started are removed."""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from helpers.loopback_hub import LoopbackHub, loopback_hub
from helpers.support import IN_CI, LABCTL, REPO, Result

SIM = REPO / "build" / "sim-lab"
SOCKETS = {"sim-h100": "/var/run/labctl-sim/docker.sock", "sim-gb10": "/var/run/labctl-sim/gb10/docker.sock"}
REGISTRY = "127.0.0.1:5000"


@dataclass
class SimUser:
    root: Path  # the user's home folder ($HOME)
    env: dict[str, str]
    hub: LoopbackHub

    @property
    def lab(self) -> Path:
        return self.root / "lab"

    def labctl(self, *args: str, cwd: Path | None = None, timeout: float = 300) -> Result:
        proc = subprocess.run(
            [*LABCTL, *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=cwd or self.root,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def profile(self, engine: str, name: str) -> Path:
        return self.lab / "engines" / engine / "profiles" / f"{name}.yaml"


def require_sim_lab() -> None:
    missing = [s for s in SOCKETS.values() if not Path(s).is_socket()]
    if missing or not (SIM / "hosts.yaml").is_file():
        reason = f"the simulated GPU lab is not up ({', '.join(missing) or 'build/sim-lab/hosts.yaml'} absent)"
        if IN_CI:
            pytest.fail(f"CI=true and {reason}: make sim-lab", pytrace=False)
        pytest.skip(f"SKIPPED LOUDLY: {reason}; run `make sim-lab`")


@contextmanager
def sim_user(tmp_path: Path) -> Iterator[SimUser]:
    """A fresh user whose default host is sim-h100 (no lab yet: `labctl init` makes one)."""
    require_sim_lab()
    root = tmp_path / "user"
    config = root / ".config"
    (config / "labctl").mkdir(parents=True)
    hosts = yaml.safe_load((SIM / "hosts.yaml").read_text())
    for name, entry in hosts["hosts"].items():
        private = tmp_path / f"{name}.json"
        shutil.copy(Path(entry["nvidia_smi"][-1]), private)
        entry["nvidia_smi"][-1] = str(private)
    (config / "labctl" / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    drop = ("LABCTL_LAB", "LABCTL_HOME", "LABCTL_HOSTS", "HF_TOKEN", "DOCKER_HOST")
    with loopback_hub() as hub:
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env |= {
            "HOME": str(root),
            "XDG_CONFIG_HOME": str(config),
            "XDG_DATA_HOME": str(root / ".local" / "share"),
            "HF_ENDPOINT": hub.endpoint,
            "LABCTL_CACHE_DIR": str(tmp_path / "hf"),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        }
        try:
            yield SimUser(root, env, hub)
        finally:
            remove_containers(tmp_path)


def simulate(lab: Path, engine: str, profile: str) -> None:
    """The profile's image becomes its engine's persona by tag (still unpinned, as shipped); where this machine
    grants no unlimited memlock, the engine file asks for its hard limit (as scripts/sim_lab_folder.py does)."""
    path = lab / "engines" / engine / "profiles" / f"{profile}.yaml"
    text = path.read_text()
    version = re.search(r'^engine_version:\s*"?([A-Za-z0-9._-]+)"?', text, re.M)
    assert version, path
    persona = f"{REGISTRY}/labctl/persona-{engine}:{version.group(1)}"
    text = re.sub(r"^image:.*$", f"image: {persona}", text, count=1, flags=re.M)
    assert "\nunpinned: true" in text, "a shipped GPU profile is unpinned"
    path.write_text(text)
    _soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if hard != resource.RLIM_INFINITY:
        engine_file = lab / "engines" / engine / "engine.yaml"
        engine_file.write_text(re.sub(r"^(\s+memlock:)\s*-1\b.*$", rf"\1 {hard}", engine_file.read_text(), flags=re.M))


def remove_containers(tmp_path: Path) -> None:
    """Nothing a test started on the simulated hosts outlives it (its compose projects live under tmp_path)."""
    for socket in SOCKETS.values():
        env = {**os.environ, "DOCKER_HOST": f"unix://{socket}"}
        ids = subprocess.run(
            ["docker", "ps", "-aq", "--filter", "label=labctl.run_id"], capture_output=True, text=True, env=env
        ).stdout.split()
        for container in ids:
            where = subprocess.run(
                [
                    "docker",
                    "inspect",
                    "-f",
                    '{{index .Config.Labels "com.docker.compose.project.working_dir"}}',
                    container,
                ],
                capture_output=True,
                text=True,
                env=env,
            ).stdout
            if str(tmp_path) in where:
                subprocess.run(["docker", "rm", "-f", container], capture_output=True, env=env)
