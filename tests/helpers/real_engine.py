"""The real-engine tier (tests/real/): vLLM's own server on CPU (`make vllm-cpu-image`) serving the lab's tiny
models, started by `labctl up` like any engine. Each module starts its servers once (a cold start is about
35 s on 2 cores). Without the image the tests skip loudly; under CI=true they fail."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import remove_runs
from helpers.support import IN_CI, LABCTL, REPO, Result, docker_available, run_labctl

IMAGE = os.environ.get("LABCTL_VLLM_CPU_IMAGE", "labctl/vllm-cpu:0.32.0")
TINY_MODELS = REPO / "build" / "tiny-models"  # `make tiny-models`; labctl makes them itself when missing
UP_TIMEOUT_S = 1000.0  # a cold start is ~35 s on 2 idle cores; over 420 s seen in CI while the other tiers shared them


def need_image() -> None:
    reason = None
    if not docker_available():
        reason = "no Docker Engine answers `docker info`"
    elif subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        reason = f"the image {IMAGE} is missing"
    if reason is None:
        if not (TINY_MODELS / "SHA256SUMS").is_file():  # `make test` made them; by hand, make them here
            made = subprocess.run(["bash", str(REPO / "scripts" / "tiny-models.sh")], capture_output=True, text=True)
            assert made.returncode == 0, made.stdout + made.stderr
        return
    if IN_CI:
        pytest.fail(f"CI=true and {reason}: CI must build it (make vllm-cpu-image)", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}; run `make vllm-cpu-image` to test the real vLLM CPU engine")


def image_id() -> str:
    return subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", IMAGE], capture_output=True, text=True, check=True
    ).stdout.strip()


@dataclass
class RealLab:
    """A private lab copy, a home and a model cache: what one module's servers share."""

    lab: Path
    home: Path
    cache: Path

    @property
    def env(self) -> dict[str, str]:
        return {
            "LABCTL_HOME": str(self.home),
            "LABCTL_CACHE_DIR": str(self.cache),
            "HF_HUB_CACHE": str(self.cache / "hub"),  # where bench finds the model's own tokenizer
            "LABCTL_TINY_MODELS": str(TINY_MODELS),
        }

    def labctl(self, *args: str, timeout: float = 300, env: dict[str, str] | None = None) -> Result:
        return run_labctl(*args, lab=self.lab, env={**self.env, **(env or {})}, timeout=timeout)

    def popen(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*LABCTL, *args],
            env={**os.environ, **self.env, "LABCTL_LAB": str(self.lab), **(env or {})},
            cwd=self.lab,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def add_profile(self, name: str, base: str = "tiny-qwen3", **changes: object) -> None:
        """A variant of a shipped tiny profile (`model_thinking="on"` changes model.thinking)."""
        folder = self.lab / "engines" / "vllm-cpu" / "profiles"
        data = yaml.safe_load((folder / f"{base}.yaml").read_text())
        for key, value in changes.items():
            if key.startswith("model_"):
                data["model"][key.removeprefix("model_")] = value
            else:
                data[key] = value
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))

    def up(self, profile: str, *args: str, port: int | None = None) -> dict[str, str]:
        """`labctl up` of a profile on a free port of this machine's test range (a cold start: ~35 s)."""
        where = ["--port", str(port or free_port())]
        done = self.labctl(
            "up", "vllm-cpu", "--profile", profile, "--allow-unpinned", "--json", *where, *args, timeout=UP_TIMEOUT_S
        )
        assert done.code == 0, f"up {profile} failed ({done.code}): {done.stderr[-3000:]}{logs_of_runs(self.home)}"
        info: dict[str, str] = json.loads(done.stdout)
        return info

    def record(self, run_id: str) -> dict:
        return json.loads((self.home / "runs" / run_id / "record.json").read_text())

    def down_all(self) -> None:
        remove_runs(self.home)


def real_lab(root: Path) -> RealLab:
    need_image()
    lab = root / "lab"
    shutil.copytree(REPO / "engines", lab / "engines", ignore=shutil.ignore_patterns("Dockerfile"))
    for folder in ("templates", "workloads", "suites"):
        shutil.copytree(REPO / folder, lab / folder)
    (lab / "compose").mkdir()
    home, cache = root / "home", root / "cache"
    home.mkdir()
    cache.mkdir()
    return RealLab(lab, home, cache)


def logs_of_runs(home: Path) -> str:
    """The last lines of every engine container a home's runs left: why a server did not become ready."""
    out = []
    runs = home / "runs"
    for run_dir in runs.iterdir() if runs.is_dir() else []:
        ids = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=labctl.run_id={run_dir.name}"], capture_output=True, text=True
        ).stdout.split()
        for cid in ids:
            logs = subprocess.run(["docker", "logs", "--tail", "25", cid], capture_output=True, text=True)
            out.append(f"\n--- {run_dir.name} {cid}:\n{logs.stdout[-2000:]}{logs.stderr[-2000:]}")
    return "".join(out)


def metric(base: str, name: str, absent: float | None = None) -> float:
    """One vLLM counter or gauge from the engine's own /metrics (the sum over its label sets); `absent` is its
    value when the engine does not export it."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    if not values and absent is not None:
        return absent
    assert values, f"{name} is not in {base}/metrics"
    return sum(values)


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
