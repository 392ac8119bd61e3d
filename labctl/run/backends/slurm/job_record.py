"""A cluster run's facts in the run's one record (`runs/<id>/record.json`): the typed record every other
command reads (show, status, export, bench, eval, reproduce), with its `slurm` part. While the job goes on,
labctl works on that `Record`; each save writes what the job's state decides (status, GPUs, endpoint, prep)."""

from __future__ import annotations

import dataclasses
from typing import Any

from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile
from labctl.compose.canonical import canonical_compose, sha256_text
from labctl.compose.labels import RunLabels
from labctl.errors import BadInput
from labctl.host.gpus.inventory import Gpu
from labctl.host.identity import process_token
from labctl.run.records.prep import PrepPart
from labctl.run.records.record import (
    SLURM_QUEUED,
    ComposeInfo,
    Endpoint,
    GpuSet,
    ImageInfo,
    Record,
    ResidentInfo,
    SlurmJob,
    Timings,
    new_record,
    now,
)
from labctl.run.records.store import Runs
from labctl.run.resident.keys import fingerprint

CLEAN_END = ("COMPLETED", "CANCELLED")
NO_GPU = "no GPU"  # an engine that uses none (the harness): the granted GPUs are in the slurm part only


def base_record(
    lab: Lab, runs: Runs, run_id: str, job: SlurmJob, profile: Profile, labels: RunLabels, project: str, simulated: bool
) -> Record:
    """The record as submitted: what would run, before Slurm chose where."""
    engine = profile.engine
    return new_record(
        run_id,
        engine.name,
        profile.name,
        profile.served_model_name,
        Endpoint(host="127.0.0.1", port=profile.port),
        labels.owner,
        "harness-check" if simulated else engine.environment_label,
        created_at=labels.created_at,
        record_path=str(runs.record_path(run_id)),
        profile_sha256=profile.sha256,
        resolved_profile=profile.spec,
        probe=engine.readiness.probe,
        probe_timeout_s=engine.readiness.probe_timeout_s,
        metrics_path=engine.metrics_path,
        image=ImageInfo(reference=profile.image_text, digest=profile.image_digest, pinned=profile.pinned),
        compose=ComposeInfo(
            file="compose.yaml",
            project=project,
            command=("docker", "compose", "up", "serve"),
            render_options={"cache_dir": None, "engine_store": None},
        ),
        env_names=profile.env_names,
        accelerator="simulated" if simulated or not engine.needs_gpu else "gpu",
        host_entry=job.cluster,
        docker_endpoint="",
        run_labels=labels,
        setup=setup_hash(lab, profile, profile.image_digest),
        slurm=job,
        gpus=gpu_set(job, engine.needs_gpu, simulated),
        up_process=process_token(),  # a later `status` adopts or cancels the job when this `up` is gone
    )


def resident_of_job(profile: Profile, keys: list[str]) -> ResidentInfo:
    """A resident run on a cluster: its keys (share reads them); Slurm, not a watcher, keeps the job, which
    ends with its time limit."""
    return ResidentInfo(
        restart_policy="no",
        bind=profile.bind_address,
        auth=profile.engine.auth.kind,
        keys=len(keys),
        key_fingerprints=tuple(fingerprint(k) for k in keys),
        watcher_note="a Slurm job: Slurm keeps it until its time limit, no restart watcher",
    )


def setup_hash(lab: Lab, profile: Profile, digest: str | None) -> dict[str, str]:
    canonical = canonical_compose(lab, profile.engine, profile.name, profile.spec, digest, False)
    return {"compose_sha256": sha256_text(canonical)}


def job_of(record: Record) -> SlurmJob:
    """The record's slurm part; a run that did not run on a cluster is refused."""
    if record.slurm is None:
        raise BadInput(f"run {record.run_id} did not run on a Slurm cluster.")
    return record.slurm


def with_job(record: Record, **changes: Any) -> Record:
    """The record with its slurm part changed."""
    return record.changed(slurm=dataclasses.replace(job_of(record), **changes))


def with_event(record: Record, text: str) -> Record:
    job = job_of(record)
    return with_job(record, events=(*job.events, text))


def needs_gpu(record: Record) -> bool:
    return record.gpus.note != NO_GPU


def gpu_set(job: SlurmJob, uses_gpus: bool, simulated: bool) -> GpuSet:
    devices = tuple(Gpu(str(i), "", uuid, "", "") for i, uuid in zip(job.gpu_indexes, job.gpu_uuids, strict=False))
    if not uses_gpus:  # the granted GPUs are in the slurm part; the setup itself holds none
        return GpuSet(note=NO_GPU, simulated=simulated)
    return GpuSet(
        ids=tuple(str(i) for i in job.gpu_indexes),
        count=len(job.gpu_indexes) or job.gpus_requested,
        devices=devices,
        note="simulated GPU" if simulated else None,
        simulated=simulated,
    )


def run_status(record: Record) -> str:
    job = job_of(record)
    if job.state in SLURM_QUEUED or (job.state in ("RUNNING", "COMPLETING") and not record.endpoint.base_url):
        return "starting"
    if job.state in ("RUNNING", "COMPLETING"):
        return "running"
    return "stopped" if job.state in CLEAN_END else "failed"


def changes(current: Record, record: Record) -> dict[str, Any]:
    """What the record says now that the job has moved on."""
    job = job_of(record)
    status = run_status(record)
    prep = dict(current.prep)
    if job.queue_wait_s is not None:
        prep["queue_wait"] = PrepPart(job.queue_wait_s, detail="sbatch -> job running (Slurm's queue)")
    ready_s = record.timings.ready_s
    if ready_s is not None:
        prep["engine_load"] = PrepPart(ready_s, detail="job running -> engine ready")
    facts: dict[str, Any] = {
        "status": status,
        "slurm": job,
        "gpus": gpu_set(job, needs_gpu(record), record.gpus.simulated),
        "endpoint": Endpoint(host="127.0.0.1", port=record.endpoint.port or 0, base_url=record.endpoint.base_url),
        "forward": record.forward,
        "host_entry": f"{job.cluster}/{job.node}" if job.node else job.cluster,
        "docker_endpoint": record.docker_endpoint,
        "timings": dataclasses.replace(current.timings or Timings(), ready_s=ready_s),
        "prep": prep,
    }
    if status == "running" and current.ready_at is None:
        facts["ready_at"] = now()
    if status in ("stopped", "failed") and current.stopped_at is None:
        facts["stopped_at"] = now()
        facts["stop_reason"] = f"Slurm job {job.job_id} {job.state}"
        facts["reason"] = None if status == "stopped" else f"job {job.state}, exit {job.exit_code or '?'}"
    return facts


def save(runs: Runs, record: Record) -> Record:
    """The job's facts written into the record on disk (what others wrote there since is kept)."""
    return runs.update(record.run_id, **changes(runs.load(record.run_id), record))


def cluster_run_ids(runs: Runs, cluster: str | None) -> list[str]:
    """This home's runs on the cluster (None: on any cluster)."""
    found = []
    for run_id in runs.all_ids():
        run = runs.try_load(run_id)
        if run is not None and run.slurm is not None and cluster in (None, run.slurm.cluster):
            found.append(run_id)
    return found
