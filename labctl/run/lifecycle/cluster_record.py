"""A cluster run's facts as the run's normal record (`runs/<id>/record.json`): the typed record every other
command reads (show, status, export, bench, eval, reproduce), plus its `slurm` block. While the run goes on,
labctl works on a `ClusterRecord`; each save writes it through into the record."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile
from labctl.compose.canonical import canonical_compose, sha256_text
from labctl.compose.labels import RunLabels
from labctl.errors import BadInput
from labctl.host.gpus.inventory import Gpu
from labctl.host.remote.forward import Forward
from labctl.run.records.prep import PrepPart
from labctl.run.records.record import (
    ComposeInfo,
    Endpoint,
    GpuSet,
    ImageInfo,
    Record,
    SlurmJob,
    Timings,
    new_record,
    now,
)
from labctl.run.records.store import Runs

QUEUED = ("SUBMITTED", "PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED")
CLEAN_END = ("COMPLETED", "CANCELLED")


@dataclass
class ClusterRecord:
    """What a run on a cluster adds to its record: the job, where Slurm put it, and how it ended."""

    run_id: str
    cluster: str
    engine: str
    profile: str
    job_id: str = ""
    port: int = 0
    gpus_requested: int = 0
    time_limit_min: int = 0
    cpus: int | None = None
    mem_mib: int | None = None
    submitted_at: str = ""
    node: str = ""
    docker: str = ""  # how the chosen node's Docker Engine is reached
    gpu_indexes: list[int] = field(default_factory=list)
    gpu_uuids: list[str] = field(default_factory=list)
    queue_wait_s: float | None = None  # a prep part of its own: never in cold start
    ready_s: float | None = None  # from the job running to the engine answering
    state: str = "SUBMITTED"
    reason: str = ""
    exit_code: str = ""
    state_source: str = ""  # squeue, sacct, scontrol, or unknown
    simulated: bool = False
    needs_gpu: bool = True  # False: an engine that uses none (the harness) holds the granted GPUs unused
    resident_keys: int = 0  # a resident run: how many API keys (the keys live in the home's key store only)
    base_url: str = ""
    forward: Forward | None = None  # the managed SSH forward when the node is reached over SSH
    events: list[str] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.state not in (*QUEUED, "RUNNING", "COMPLETING")


def base_record(
    lab: Lab, runs: Runs, record: ClusterRecord, profile: Profile, labels: RunLabels, project: str
) -> Record:
    """The record as submitted: what would run, before Slurm chose where."""
    engine = profile.engine
    return new_record(
        record.run_id,
        engine.name,
        profile.name,
        profile.served_model_name,
        Endpoint(host="127.0.0.1", port=record.port),
        labels.owner,
        "harness-check" if record.simulated else engine.environment_label,
        created_at=labels.created_at,
        record_path=str(runs.record_path(record.run_id)),
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
        accelerator="simulated" if record.simulated or not engine.needs_gpu else "gpu",
        host_entry=record.cluster,
        docker_endpoint="",
        run_labels=labels,
        setup=setup_hash(lab, profile, profile.image_digest),
        slurm=slurm_block(record),
        gpus=gpu_set(record),
    )


def setup_hash(lab: Lab, profile: Profile, digest: str | None) -> dict[str, str]:
    canonical = canonical_compose(lab, profile.engine, profile.name, profile.spec, digest, False)
    return {"compose_sha256": sha256_text(canonical)}


def slurm_block(record: ClusterRecord) -> SlurmJob:
    return SlurmJob(
        cluster=record.cluster,
        job_id=record.job_id,
        node=record.node,
        gpu_indexes=tuple(record.gpu_indexes),
        gpu_uuids=tuple(record.gpu_uuids),
        gpus_requested=record.gpus_requested,
        time_limit_min=record.time_limit_min,
        cpus=record.cpus,
        mem_mib=record.mem_mib,
        submitted_at=record.submitted_at,
        state=record.state,
        reason=record.reason,
        exit_code=record.exit_code,
        state_source=record.state_source,
        queue_wait_s=record.queue_wait_s,
        resident_keys=record.resident_keys,
        events=tuple(record.events),
    )


def gpu_set(record: ClusterRecord) -> GpuSet:
    devices = tuple(
        Gpu(str(i), "", uuid, "", "") for i, uuid in zip(record.gpu_indexes, record.gpu_uuids, strict=False)
    )
    if not record.needs_gpu:  # the granted GPUs are in the slurm block; the setup itself holds none
        return GpuSet(note="no GPU", simulated=record.simulated)
    return GpuSet(
        ids=tuple(str(i) for i in record.gpu_indexes),
        count=len(record.gpu_indexes) or record.gpus_requested,
        devices=devices,
        note="simulated GPU" if record.simulated else None,
        simulated=record.simulated,
    )


def run_status(record: ClusterRecord) -> str:
    if record.state in QUEUED or (record.state in ("RUNNING", "COMPLETING") and not record.base_url):
        return "starting"
    if record.state in ("RUNNING", "COMPLETING"):
        return "running"
    return "stopped" if record.state in CLEAN_END else "failed"


def changes(current: Record, record: ClusterRecord) -> dict[str, Any]:
    """What the record says now that the job has moved on."""
    status = run_status(record)
    prep = dict(current.prep)
    if record.queue_wait_s is not None:
        prep["queue_wait"] = PrepPart(record.queue_wait_s, detail="sbatch -> job running (Slurm's queue)")
    if record.ready_s is not None:
        prep["engine_load"] = PrepPart(record.ready_s, detail="job running -> engine ready")
    facts: dict[str, Any] = {
        "status": status,
        "slurm": slurm_block(record),
        "gpus": gpu_set(record),
        "endpoint": Endpoint(host="127.0.0.1", port=record.port, base_url=record.base_url),
        "forward": record.forward,
        "host_entry": f"{record.cluster}/{record.node}" if record.node else record.cluster,
        "docker_endpoint": record.docker,
        "timings": dataclasses.replace(current.timings or Timings(), ready_s=record.ready_s),
        "prep": prep,
    }
    if status == "running" and current.ready_at is None:
        facts["ready_at"] = now()
    if status in ("stopped", "failed") and current.stopped_at is None:
        facts["stopped_at"] = now()
        facts["stop_reason"] = f"Slurm job {record.job_id} {record.state}"
        facts["reason"] = None if status == "stopped" else f"job {record.state}, exit {record.exit_code or '?'}"
    return facts


def save(runs: Runs, record: ClusterRecord) -> None:
    runs.update(record.run_id, **changes(runs.load(record.run_id), record))


def from_record(run: Record) -> ClusterRecord:
    job = run.slurm
    if job is None:
        raise BadInput(f"run {run.run_id} did not run on a Slurm cluster.")
    return ClusterRecord(
        run.run_id,
        job.cluster,
        run.engine,
        run.profile,
        job_id=job.job_id,
        port=run.endpoint.port or 0,
        gpus_requested=job.gpus_requested,
        time_limit_min=job.time_limit_min,
        cpus=job.cpus,
        mem_mib=job.mem_mib,
        submitted_at=job.submitted_at,
        node=job.node,
        docker=run.docker_endpoint,
        gpu_indexes=list(job.gpu_indexes),
        gpu_uuids=list(job.gpu_uuids),
        queue_wait_s=job.queue_wait_s,
        ready_s=run.timings.ready_s,
        state=job.state,
        reason=job.reason,
        exit_code=job.exit_code,
        state_source=job.state_source,
        simulated=run.gpus.simulated,
        needs_gpu=run.gpus.note != "no GPU",
        resident_keys=job.resident_keys,
        base_url=run.endpoint.base_url,
        forward=run.forward,
        events=list(job.events),
    )


def load(runs: Runs, run_id: str) -> ClusterRecord:
    return from_record(runs.load(run_id))


def is_cluster_run(runs: Runs, run_id: str) -> bool:
    run = runs.try_load(run_id)
    return run is not None and run.slurm is not None


def cluster_run_ids(runs: Runs, cluster: str | None) -> list[str]:
    """This home's runs on the cluster (None: on any cluster)."""
    found = []
    for run_id in runs.all_ids():
        run = runs.try_load(run_id)
        if run is not None and run.slurm is not None and cluster in (None, run.slurm.cluster):
            found.append(run_id)
    return found
