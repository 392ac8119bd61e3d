"""Helpers for tests that start real containers: harness profiles written into a lab copy, and a
teardown that removes every container a test's runs left behind."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from helpers.support import Result, run_labctl

IMAGE = "127.0.0.1:5000/labctl/harness:dev"


def write_profile(
    lab: Path,
    name: str,
    port: int,
    extra: list[str] | None = None,
    image: str = IMAGE,
    pinned_comment: bool = False,
) -> None:
    data = {
        "description": f"test profile {name}",
        "image": image,
        "unpinned": True,
        "model": {"id": "labctl/harness-synthetic", "revision": "v1", "family": "synthetic", "quantization": "none"},
        "served_model_name": "harness-test",
        "max_model_len": 4096,
        "max_num_seqs": 64,
        "port": port,
        "extra_args": ["--cold-start", "0.2", "--ttft-ms", "5", "--tpot-ms", "1", *(extra or [])],
    }
    (lab / "engines" / "harness" / "profiles" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def up(lab: Path, home: Path, profile: str, *args: str, timeout: float = 60) -> Result:
    return run_labctl(
        "up",
        "harness",
        "--profile",
        profile,
        "--allow-unpinned",
        "--json",
        *args,
        lab=lab,
        env={"LABCTL_HOME": str(home)},
        timeout=timeout,
    )


def labctl(lab: Path, home: Path, *args: str) -> Result:
    return run_labctl(*args, lab=lab, env={"LABCTL_HOME": str(home)})


def record(home: Path, run_id: str) -> dict:
    return json.loads((home / "runs" / run_id / "record.json").read_text())


def containers_of(run_id: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=labctl.run_id={run_id}"], capture_output=True, text=True
    )
    return out.stdout.split()


def watchers_of(run_id: str) -> list[str]:
    """The restart watcher containers of a run (resident runs have one)."""
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=labctl.watch_of={run_id}"], capture_output=True, text=True
    )
    return out.stdout.split()


def remove_runs(home: Path) -> None:
    runs = home / "runs"
    for run_dir in runs.iterdir() if runs.is_dir() else []:
        ids = containers_of(run_dir.name) + watchers_of(run_dir.name)
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
