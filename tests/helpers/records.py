"""Run records for harness engines started here as local processes: shaped as `labctl up harness --profile
smoke` writes them, so that bench, eval, compare and report really talk to an engine without Docker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import lab_copy
from labctl.catalog.lab import find_lab
from labctl.catalog.profiles import load_profile
from labctl.run.records.record import ContainerInfo, Endpoint, EngineSetup, ImageInfo, new_record
from labctl.run.records.store import Runs, new_run_id

DIGEST = "sha256:" + "ef" * 32


def copy_lab(root: Path) -> Path:
    """A private copy of the shipped lab's folders under `root`/lab."""
    return lab_copy.copy_lab(root / "lab")


def harness_run_record(
    lab: Path,
    home: Path,
    base: str,
    served: str | None = None,
    command_line: tuple[str, ...] = ("python3", "-m", "labctl.harness"),
    digest: str = DIGEST,
    profile_name: str = "smoke",
    **facts: Any,
) -> str:
    """Save a `running` record of a harness profile (smoke) whose endpoint is `base`; returns its run id."""
    profile = load_profile(find_lab(str(lab)), "harness", profile_name)
    runs, run_id = Runs(home), new_run_id()
    record = new_record(
        run_id,
        "harness",
        profile_name,
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


def stopped_smoke_run(lab: Path, home: Path, cache_dir: Path) -> str:
    """A stopped run of the harness smoke profile with the compose file `up` would have written beside it (same
    labels, same render options, same compose hash), so that `export` and `reproduce` take it as one of theirs
    without Docker. Returns its run id."""
    from labctl.compose.canonical import canonical_compose, sha256_text
    from labctl.compose.labels import RunLabels
    from labctl.compose.options import render_options
    from labctl.compose.render import render_compose
    from labctl.host.identity import current_user, host_name
    from labctl.run.records.record import ComposeInfo, now
    from labctl.run.records.store import RUN_FILE_MODE

    found = find_lab(str(lab))
    profile = load_profile(found, "harness", "smoke")
    runs, run_id = Runs(home), new_run_id()
    labels = RunLabels(
        home=str(home),
        controller=host_name(),
        run_id=run_id,
        owner=current_user(),
        created_at=now(),
        port=str(profile.port),
        host=profile.bind_address,
    )
    options = render_options(profile, str(cache_dir), labels=labels.run_labels(), restart="no")
    compose = render_compose(found, profile, options)
    (runs.make_dir(run_id) / "compose.yaml").write_text(compose)
    (runs.dir(run_id) / "compose.yaml").chmod(RUN_FILE_MODE)
    canonical = canonical_compose(found, profile.engine, profile.name, profile.spec, DIGEST, False)
    record = new_record(
        run_id,
        "harness",
        "smoke",
        profile.served_model_name,
        Endpoint(host=profile.bind_address, port=profile.port, base_url=f"http://127.0.0.1:{profile.port}/v1"),
        None,
        "harness-check",
        status="stopped",
        record_path=str(runs.record_path(run_id)),
        created_at=labels.created_at,
        profile_sha256=profile.sha256,
        resolved_profile=profile.spec,
        image=ImageInfo(reference=profile.spec["image"], digest=DIGEST, pinned=False),
        compose=ComposeInfo(
            file="compose.yaml", project=f"labctl-{run_id}", render_options={"cache_dir": str(cache_dir)}
        ),
        run_labels=labels,
        engine_setup=EngineSetup(version=profile.engine_version, thinking=profile.model.thinking),
        setup={"compose_sha256": sha256_text(canonical)},
    )
    runs.save(record)
    return run_id
