"""Which `--host` names and which records are a Slurm cluster's, and the clusters' part of `labctl status`."""

from __future__ import annotations

from pathlib import Path

import labctl.run.backends.slurm.jobs as jobs
from labctl.catalog.clusters_file import get_cluster
from labctl.catalog.lab import Lab
from labctl.errors import BadInput
from labctl.host.slurm.commands import SlurmUnreachable
from labctl.run.backends.backend import StatusSection
from labctl.run.backends.slurm.job_record import cluster_run_ids
from labctl.run.backends.slurm.slurm_cluster import SlurmCluster
from labctl.run.records.record import Record
from labctl.run.records.store import Runs


class SlurmKind:
    name = "slurm"

    def find(self, lab_root: Path, name: str) -> SlurmCluster | None:
        cluster = get_cluster(lab_root, name)
        return SlurmCluster(cluster) if cluster is not None else None

    def of_run(self, lab_root: Path, record: Record) -> SlurmCluster | None:
        if record.slurm is None:
            return None
        found = self.find(lab_root, record.slurm.cluster)
        if found is None:
            raise BadInput(
                f"run {record.run_id} ran on cluster {record.slurm.cluster!r}, which no hosts file names any more."
            )
        return found

    def status_all(self, lab: Lab, runs: Runs, only: str | None) -> list[StatusSection]:
        """This home's cluster runs whose job has not been seen to end, refreshed from Slurm, by cluster
        (`status --host CLUSTER` lists the ended ones too)."""
        live: dict[str, tuple[SlurmCluster, list[Record]]] = {}
        unreachable: dict[str, str] = {}  # a cluster that did not answer: asked once, its records left as they are
        for run_id in cluster_run_ids(runs, None):
            record = jobs.load(runs.home, run_id)
            job = record.slurm
            assert job is not None
            backend = None if job.ended else self.find(lab.root, job.cluster)
            if backend is not None and job.job_id:
                if backend.name not in unreachable:
                    try:
                        record = jobs.refresh(runs.home, backend.cluster, record)
                    except SlurmUnreachable as exc:
                        unreachable[backend.name] = str(exc)
                if record.slurm is not None and not record.slurm.ended:
                    live.setdefault(backend.name, (backend, []))[1].append(record)
        return [
            backend.section(found, problem=unreachable.get(name, "")) for name, (backend, found) in sorted(live.items())
        ]
