"""`labctl reproduce SOURCE --host CLUSTER`: the recorded setup, pinned by its digest, submitted as a Slurm job
like `up --host CLUSTER`; Slurm chooses the node and the GPUs, the export only says how many."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from labctl.catalog.lab import Lab
from labctl.host.slurm.clusters import ClusterEntry
from labctl.run.lifecycle.cluster_run import up_on_cluster
from labctl.run.lifecycle.reproduce import ReproduceRequest, checked_source, reproduction
from labctl.run.records.record import Record
from labctl.run.records.store import Runs


def reproduce_on_cluster(
    lab: Lab, runs: Runs, cluster: ClusterEntry, request: ReproduceRequest, say: Any, minutes: int | None = None
) -> Record:
    export, profile, check, placed = checked_source(lab, runs, request, say)
    resident = (export.record or {}).get("resident")
    keys = int(resident.get("keys") or 1) if isinstance(resident, dict) else 0
    gpus = placed.gpu_count or len(export.host.get("gpu_ids") or []) or None
    run = up_on_cluster(
        lab,
        Path(runs.home),
        cluster,
        profile.engine.name,
        profile.name,
        say,
        gpus=gpus,
        port=request.port,
        minutes=minutes,
        timeout=request.timeout,
        keys=keys,
        profile=placed,
    )
    record = runs.load(run.run_id)
    return runs.update(
        run.run_id,
        reproduced_from=export.run_id,
        reproduction=reproduction(export, record, bool(check.problems)),
    )
