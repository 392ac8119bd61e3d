"""A cluster run whose `labctl up` is gone (SIGKILL, a crash, a closed laptop) while its job was queued or its
engine starting, put right by the next `status` with the rule a host's runs follow (run/lifecycle/reconcile.py):
a healthy engine is adopted, its node, GPUs and endpoint read back from Slurm; anything else is cancelled and
recorded aborted. A submission cut short is looked up by the job's name before it is called failed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import labctl.run.backends.slurm.jobs as jobs
from labctl.catalog.clusters_file import ClusterEntry
from labctl.host.engine.probes import probe_now
from labctl.host.identity import process_alive
from labctl.host.remote.forward import close_forward
from labctl.host.slurm import commands as slurm
from labctl.host.slurm.parse import JobState
from labctl.run.backends.slurm.job_record import job_of, with_event, with_job
from labctl.run.lifecycle.reconcile import ABORTED_REASON, ADOPTED_REASON
from labctl.run.records.record import Record, now
from labctl.run.records.store import Runs


def abandoned(record: Record) -> bool:
    """Left `starting` by an `up` that no longer runs (records from before up_process was kept are left alone)."""
    return record.status == "starting" and bool(record.up_process) and not process_alive(record.up_process)


def settle(home: Path, cluster: ClusterEntry, record: Record) -> str:
    """Adopt, cancel or fail one abandoned run; the line `status` says of it."""
    runs, run_id = Runs(home), record.run_id
    if not job_of(record).job_id:
        found = slurm.job_by_name(cluster, f"labctl-{run_id}")
        if found is None:
            runs.update(run_id, status="failed", reason="its labctl up was gone before the job was submitted")
            runs.event(run_id, "failed", reason="labctl up gone before sbatch answered")
            return f"failed {run_id}: its labctl up was gone before Slurm took the job; nothing was queued"
        record = jobs.save(home, with_event(with_job(record, job_id=found), f"{now()} found job {found} by name"))
    job_id = job_of(record).job_id
    state = slurm.job_state(cluster, job_id)
    record = jobs.apply_state(record, state)
    if state.running and _adopt(home, cluster, record, state):
        runs.event(run_id, "adopted")
        return f"adopted {run_id}: its labctl up was gone, job {job_id} on {job_of(runs.load(run_id)).node} answers"
    jobs.take_down(home, cluster, record)
    runs.update(run_id, status="aborted", reason=ABORTED_REASON)
    runs.event(run_id, "aborted", reason="labctl up gone")
    return f"aborted {run_id}: its labctl up was gone before the engine was ready; job {job_id} was cancelled"


def _adopt(home: Path, cluster: ClusterEntry, record: Record, state: JobState) -> bool:
    """The engine answers its readiness probe now: the record gets its node, GPUs and endpoint."""
    record = jobs.placed(cluster, record, state)
    job = job_of(record)
    if job.resident_keys and not any(" keys delivered to " in event for event in job.events):
        return False  # the job waits for keys its up never delivered: its engine cannot have started
    base, forward = jobs.reach_engine(home, cluster, record)
    if probe_now(base, record.probe, record.probe_timeout_s) != "healthy":
        close_forward(forward)
        return False
    endpoint = dataclasses.replace(record.endpoint, base_url=base + "/v1")
    jobs.save(home, with_event(record, f"{now()} adopted").changed(endpoint=endpoint, forward=forward))
    Runs(home).update(record.run_id, reason=ADOPTED_REASON)
    return True
