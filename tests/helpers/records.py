"""Run records for harness engines started here as local processes: shaped as `labctl up harness --profile
smoke` writes them, so that bench, eval, compare and report really talk to an engine without Docker."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from helpers.support import REPO
from labctl.catalog.lab import find_lab
from labctl.catalog.profiles import load_profile
from labctl.run.records.record import ContainerInfo, Endpoint, EngineSetup, ImageInfo, new_record
from labctl.run.records.store import Runs, new_run_id

DIGEST = "sha256:" + "ef" * 32


def copy_lab(root: Path) -> Path:
    """A private copy of the shipped lab's folders under `root`/lab."""
    lab = root / "lab"
    for folder in ("engines", "templates", "workloads", "suites"):
        shutil.copytree(REPO / folder, lab / folder)
    return lab


def harness_run_record(
    lab: Path,
    home: Path,
    base: str,
    served: str | None = None,
    command_line: tuple[str, ...] = ("python3", "-m", "labctl.harness"),
    digest: str = DIGEST,
    **facts: Any,
) -> str:
    """Save a `running` record of the harness smoke profile whose endpoint is `base`; returns its run id."""
    profile = load_profile(find_lab(str(lab)), "harness", "smoke")
    runs, run_id = Runs(home), new_run_id()
    record = new_record(
        run_id,
        "harness",
        "smoke",
        served or profile.served_model_name,
        Endpoint(base_url=f"{base}/v1"),
        None,
        "harness-check",
        status="running",
        record_path=str(runs.record_path(run_id)),
        resolved_profile=profile.spec,
        image=ImageInfo(reference=profile.spec["image"], digest=digest, pinned=True),
        container=ContainerInfo(name=f"labctl-{run_id}", command_line=command_line),
        engine_setup=EngineSetup(version=profile.engine_version, thinking=profile.model.thinking),
        **facts,
    )
    runs.save(record)
    return run_id
