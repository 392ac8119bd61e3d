"""One engine run on a Slurm cluster: render here, submit a batch job, wait while Slurm queues it (the wait is
its own prep part, never cold start), then readiness on the node Slurm chose; down cancels the job and waits
until its containers are gone; gc finds containers whose job has ended. Slurm alone chooses the node and the
GPUs: labctl reads them back (squeue, sacct, scontrol) and records them in the `slurm` part of the run's one
record (see job_record)."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import labctl.run.backends.slurm.job_record as job_record
from labctl.catalog.clusters_file import ClusterEntry
from labctl.catalog.image import digests_of
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile, load_profile, with_overrides
from labctl.compose.labels import RunLabels
from labctl.compose.options import render_options
from labctl.compose.render import render_compose
from labctl.errors import BadInput, LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.engine.probes import wait_until_ready
from labctl.host.files.atomic import write_atomically
from labctl.host.gpus.inventory import list_gpus
from labctl.host.identity import current_user, host_name
from labctl.host.remote import key_volume
from labctl.host.remote.forward import Forward, close_forward, open_forward
from labctl.host.slurm import commands as slurm
from labctl.host.slurm.commands import SlurmError
from labctl.host.slurm.job_script import (
    JOB_LABEL,
    BatchJob,
    cluster_compose,
    job_script,
    refuse_end_marker,
    sbatch_options,
)
from labctl.host.slurm.parse import JobState
from labctl.run.backends.slurm.job_record import job_of, with_event, with_job
from labctl.run.lifecycle.down import project_name
from labctl.run.lifecycle.up_plan import unpinned_refusal
from labctl.run.records.record import ContainerInfo, ImageInfo, Record, SlurmJob, now
from labctl.run.records.store import Runs, new_run_id
from labctl.run.resident.host_keys import file_owner, fill_image
from labctl.run.resident.keys import KeyStore, generate_keys

Say = Callable[[str], None]
JOB_COMPOSE = "job-compose.yaml"  # what the job starts: compose.yaml with device_ids left to Slurm
POLL_S = 0.5


@dataclass(frozen=True)
class JobRequest:
    """What one run on a cluster asks for: the per-run options as one value. A reproduction gives its pinned
    `profile` instead of a profile name's; `gpus` is a count (Slurm chooses which)."""

    engine: str
    profile_name: str
    gpus: int | None = None
    port: int | None = None
    minutes: int | None = None
    cpus: int | None = None
    mem_mib: int | None = None
    allow_unpinned: bool = False
    timeout: float = 900.0
    keys: int = 0
    profile: Profile | None = None
    docker_bin: str = "docker"


def save(home: Path, record: Record) -> Record:
    return job_record.save(Runs(home), record)


def load(home: Path, run_id: str) -> Record:
    record = Runs(home).load(run_id)
    job_of(record)
    return record


def record_path(home: Path, run_id: str) -> Path:
    return Runs(home).record_path(run_id)


def render_for_cluster(
    lab: Lab, cluster: ClusterEntry, profile: Profile, run_id: str, home: Path, keys: bool = False
) -> tuple[str, RunLabels]:
    """The setup's compose file as for any host (what export and reproduce read), with the run's labels."""
    labels = RunLabels(
        run_id=run_id,
        owner=current_user(),
        created_at=now(),
        port=str(profile.port),
        host=cluster.name,
        home=str(home),
        controller=host_name(),
    )
    options = render_options(
        profile,
        None,
        labels=labels.run_labels(),
        environment_label="harness-check" if cluster.simulated else None,
        secrets_volume=key_volume.volume_name(run_id) if keys else None,
    )
    return render_compose(lab, profile, options), labels


def submit_run(lab: Lab, home: Path, cluster: ClusterEntry, request: JobRequest) -> Record:
    """Render, write the run's folder, and `sbatch --parsable`. Nothing secret goes into the job."""
    engine, profile_name = request.engine, request.profile_name
    profile = with_overrides(request.profile or load_profile(lab, engine, profile_name), port=request.port)
    if not profile.pinned and not request.allow_unpinned:
        raise BadInput(unpinned_refusal(lab, profile))
    count = request.gpus if request.gpus is not None else max(profile.gpu_count, 1)
    if not 1 <= count <= 64:
        raise BadInput(f"--gpus {count}: a job asks for 1 to 64 GPUs.")
    if profile.engine.needs_gpu:  # the setup runs on N GPUs; which ones is Slurm's to say
        profile = Profile(profile.engine, profile.name, {**profile.spec, "gpus": {"count": count}}, profile.source)
    limit = request.minutes or cluster.time_minutes
    keys = request.keys
    run_id = new_run_id()
    folder = home / "runs" / run_id
    setup_text, labels = render_for_cluster(lab, cluster, profile, run_id, home, keys=keys > 0)
    compose_text = cluster_compose(setup_text, count)  # the GPUs are Slurm's to grant: the job fills device_ids
    refuse_end_marker(compose_text)
    runs = Runs(home)
    runs.make_dir(run_id)
    write_atomically(folder / "compose.yaml", setup_text)
    write_atomically(folder / JOB_COMPOSE, compose_text)
    api_keys = generate_keys(keys) if keys else []
    if api_keys:
        KeyStore(home).write(run_id, api_keys)
    volume = ready_volume(run_id) if keys else None
    script = job_script(run_id, project_name(run_id), compose_text, cluster.nodes, request.docker_bin, volume)
    cpus, mem_mib = request.cpus or profile.cpus, request.mem_mib or profile.memory_mib
    batch = BatchJob(run_id, engine, profile_name, count, limit, str(folder / "job.log"), cpus, mem_mib)
    options = sbatch_options(batch, cluster)
    job = SlurmJob(
        cluster=cluster.name,
        gpus_requested=count,
        time_limit_min=limit,
        cpus=cpus,
        mem_mib=mem_mib,
        submitted_at=now(),
        resident_keys=keys,
    )
    record = job_record.base_record(lab, runs, run_id, job, profile, labels, project_name(run_id), cluster.simulated)
    if api_keys:
        record = record.changed(resident=job_record.resident_of_job(profile, api_keys))
    runs.save(record)
    try:
        job_id = slurm.submit(cluster, options, script)
    except SlurmError as exc:
        # sbatch may have queued the job and lost only its answer (a timeout): look it up by the job's name
        found = slurm.job_by_name(cluster, f"labctl-{run_id}")
        if found is None:
            failed = with_job(record, state="NOT_SUBMITTED", reason="sbatch failed", state_source="sbatch")
            runs.save(
                dataclasses.replace(failed, status="failed", reason=f"submission failed: {exc}", stopped_at=now())
            )
            raise
        job_id = found
    return save(home, with_event(with_job(record, job_id=job_id), f"{now()} submitted job {job_id}"))


def wait_running(home: Path, cluster: ClusterEntry, record: Record, say: Say, timeout: float) -> Record:
    """Poll until Slurm runs the job (or ends it). Says each new state and reason: `pending: Resources`."""
    job_id = job_of(record).job_id
    t0 = time.monotonic()
    seen = ""
    while True:
        state = slurm.job_state(cluster, job_id)
        shown = f"{state.state.lower()}" + (f": {state.reason}" if state.reason else "")
        if shown != seen:
            say(f"job {job_id} {shown}")
            record = with_event(record, f"{now()} {shown}")
            seen = shown
        if state.running or state.ended:
            break
        if time.monotonic() - t0 > timeout:
            raise LabctlError(f"job {job_id} still {shown} after {timeout:.0f} s: `labctl` left it queued.")
        time.sleep(POLL_S)
    record = apply_state(with_job(record, queue_wait_s=round(time.monotonic() - t0, 3)), state)
    return save(home, placed(cluster, record, state) if state.running else record)


def placed(cluster: ClusterEntry, record: Record, state: JobState) -> Record:
    """The record with the node and GPUs Slurm chose for a running job, read back from Slurm."""
    indexes = slurm.job_gpus(cluster, job_of(record).job_id)
    return with_job(
        record,
        node=state.node,
        gpu_indexes=tuple(indexes),
        gpu_uuids=tuple(node_gpu_uuids(cluster, state.node, list(indexes))),
    ).changed(docker_endpoint=cluster.node(state.node).docker)


def apply_state(record: Record, state: JobState) -> Record:
    job = job_of(record)
    return with_job(
        record,
        state=state.state,
        reason=state.reason,
        state_source=state.source,
        exit_code=state.exit_code or job.exit_code,
        node=job.node or state.node,
    )


def ready_volume(run_id: str) -> str:
    return key_volume.volume_name(run_id) + "-filled"


def deliver_keys(home: Path, cluster: ClusterEntry, record: Record, image: str) -> Record:
    """The run's keys into its key volume on the node Slurm chose, over Docker's transport (stdin of a
    throwaway container), never through Slurm; the waiting job then starts the engine."""
    node = job_of(record).node
    facts = dk.image_facts(image)
    info = ImageInfo(reference=image, user=facts.user if facts else "")
    text = (KeyStore(home).folder(record.run_id) / "api_key").read_text(encoding="utf-8")
    with dk.on_endpoint(cluster.node(node).docker):
        key_volume.write_keys(record.run_id, text, fill_image(info), file_owner(info))
        # The job waits for this second, empty volume: the key volume exists before it is filled.
        with dk.docker_errors("marking the key volume filled"):
            dk.client().volume.create(ready_volume(record.run_id), labels={key_volume.LABEL: record.run_id})
    return save(home, with_event(record, f"{now()} keys delivered to {node}"))


def note_image(lab: Lab, home: Path, cluster: ClusterEntry, record: Record, profile: Profile) -> None:
    """The image the node's Docker ran, by digest and id (what `reproduce` pulls elsewhere, and the setup's
    hash), and the engine's command line as Docker reports it."""
    job = job_of(record)
    with dk.on_endpoint(cluster.node(job.node).docker):
        facts = dk.image_facts(profile.image_text)
    if facts is None:
        return
    found = digests_of(facts.repo_digests, profile.image_repository)
    digest = profile.image_digest or (found[0] if found else None)
    image = ImageInfo(
        reference=profile.image_text,
        digest=digest,
        pinned=profile.pinned,
        repo_digests=tuple(facts.repo_digests),
        image_id=facts.image_id,
        user=facts.user,
    )
    serve = [c for c in node_containers(cluster, job.node, job.job_id) if dk.service_of(c) == "serve"]
    container = (
        ContainerInfo(serve[0].name, serve[0].id, tuple(dk.command_line(serve[0])), profile.env_names)
        if serve
        else None
    )
    Runs(home).update(
        record.run_id, image=image, setup=job_record.setup_hash(lab, profile, digest), container=container
    )


def node_gpu_uuids(cluster: ClusterEntry, node: str, indexes: list[int]) -> list[str]:
    by_index = {g.index: g.uuid for g in list_gpus(cluster.node(node).nvidia_smi_argv())}
    return [by_index.get(str(i), "") for i in indexes]


def wait_ready(
    home: Path, cluster: ClusterEntry, record: Record, probe: str, timeout: float
) -> tuple[Record, Forward | None]:
    """The engine on the node Slurm chose answers: directly when the node's loopback is this machine's, else
    through a managed SSH forward, as for any SSH host."""
    job = job_of(record)
    base, forward = reach_engine(home, cluster, record)
    t0 = time.monotonic()

    def watch() -> None:
        state = slurm.job_state(cluster, job.job_id)
        if state.ended:
            raise LabctlError(f"job {job.job_id} ended ({state.state}) before the engine answered.")

    try:
        wait_until_ready(base, probe, timeout, watch)
    except BaseException:
        close_forward(forward)
        raise
    timings = dataclasses.replace(record.timings, ready_s=round(time.monotonic() - t0, 3))
    return save(home, record.changed(timings=timings)), forward


def reach_engine(home: Path, cluster: ClusterEntry, record: Record) -> tuple[str, Forward | None]:
    """The engine's address from here (without /v1): the node's loopback when it is this machine's, else a
    managed SSH forward to it (the caller closes it when it does not keep it)."""
    node, port = cluster.node(job_of(record).node), record.endpoint.port or 0
    if not node.is_remote:
        return f"http://127.0.0.1:{port}", None
    forward = open_forward(node, "127.0.0.1", port, home / "runs" / record.run_id / "forward.log")
    return forward.base, forward


def node_containers(cluster: ClusterEntry, node: str, job_id: str | None = None) -> list[Any]:
    return dk.labelled_containers(cluster.node(node).docker, f"{JOB_LABEL}={job_id}" if job_id else JOB_LABEL)


def take_down(home: Path, cluster: ClusterEntry, record: Record, timeout: float = 60.0) -> Record:
    """scancel, then wait until Slurm says the job ended and its containers are gone from the node."""
    job_id = job_of(record).job_id
    slurm.cancel(cluster, job_id)
    record = with_event(record, f"{now()} scancel")
    deadline = time.monotonic() + timeout
    while True:
        state = slurm.job_state(cluster, job_id)
        node = job_of(record).node or state.node
        left = node_containers(cluster, node, job_id) if node else []
        if state.ended and not left:
            break
        if time.monotonic() > deadline:
            raise LabctlError(f"job {job_id}: still {state.state} with {len(left)} container(s) after {timeout:.0f} s.")
        time.sleep(POLL_S)
    return finish(home, cluster, record)


def finish(home: Path, cluster: ClusterEntry, record: Record) -> Record:
    """The job's final state and exit code, from sacct when the cluster keeps accounting; a resident run's
    key volume and key store copy are removed."""
    job = job_of(record)
    state = slurm.job_state(cluster, job.job_id)
    if job.resident_keys and job.node:
        with dk.on_endpoint(cluster.node(job.node).docker):
            key_volume.remove(record.run_id)
            dk.remove_volume(ready_volume(record.run_id), "key volume marker")
        KeyStore(home).remove(record.run_id)
    record = apply_state(record, state)
    return save(
        home, with_event(record, f"{now()} ended {state.state} exit {state.exit_code or '?'} (from {state.source})")
    )


@dataclass(frozen=True)
class NodeContainers:
    """labctl's containers on a cluster's nodes: (node, container id, job id) of those whose job has ended, and
    of those kept because Slurm could not say (`unknown` says why)."""

    ended: list[tuple[str, str, str]]
    unknown: list[tuple[str, str, str]]
    why: str = ""


def leftovers(cluster: ClusterEntry) -> NodeContainers:
    """Every labctl container whose Slurm job has ended: after a node failure or a SIGKILL the container,
    Docker's process, can outlive its job. When Slurm does not answer, no job is proven ended: all are kept."""
    ended, unknown, why = [], [], ""
    for node in sorted(cluster.nodes):
        for container in node_containers(cluster, node):
            job_id = dk.labels_of(container).get(JOB_LABEL, "")
            entry = (node, container.id, job_id)
            try:  # once Slurm did not answer, it is not asked again: the next jobs would only wait for it too
                if job_id and why:
                    unknown.append(entry)
                elif not job_id or slurm.job_state(cluster, job_id).ended:
                    ended.append(entry)
            except slurm.SlurmUnreachable as exc:
                why = str(exc)
                unknown.append(entry)
    return NodeContainers(ended, unknown, why)


def remove_leftovers(cluster: ClusterEntry) -> NodeContainers:
    found = leftovers(cluster)
    for node, container_id, _job in found.ended:
        dk.remove_container_on(cluster.node(node).docker, container_id)
    return found


def forget(home: Path, run_id: str) -> None:
    shutil.rmtree(home / "runs" / run_id, ignore_errors=True)


def up_on_cluster(lab: Lab, home: Path, cluster: ClusterEntry, request: JobRequest, say: Say) -> Record:
    """Submit, wait while Slurm queues the job, then wait until the engine answers on the node Slurm chose.
    A failure or Ctrl-C cancels the job: nothing is left queued or running unaccounted."""
    profile = request.profile or load_profile(lab, request.engine, request.profile_name)
    record = submit_run(lab, home, cluster, dataclasses.replace(request, profile=profile))
    job = job_of(record)
    say(f"submitted job {job.job_id} to cluster {cluster.name} (run {record.run_id})")
    try:
        record = wait_running(home, cluster, record, say, request.timeout)
        job = job_of(record)
        if job.state != "RUNNING":
            finish(home, cluster, record)
            raise LabctlError(
                f"job {job.job_id} ended {job.state} before it ran (see {home}/runs/{record.run_id}/job.log)."
            )
        if request.keys:
            record = deliver_keys(home, cluster, record, profile.image_text)
        record, forward = wait_ready(home, cluster, record, profile.engine.readiness.probe, request.timeout)
        note_image(lab, home, cluster, record, profile)
    except BaseException:
        take_down(home, cluster, record)
        raise
    base = forward.base if forward else f"http://127.0.0.1:{record.endpoint.port}"
    endpoint = dataclasses.replace(record.endpoint, base_url=base + "/v1")
    return save(home, record.changed(endpoint=endpoint, forward=forward))


def down_on_cluster(home: Path, cluster: ClusterEntry, record: Record) -> Record:
    close_forward(record.forward)
    return take_down(home, cluster, record)


def cluster_runs(home: Path, cluster: ClusterEntry, unreachable: list[str] | None = None) -> list[Record]:
    """This home's runs on the cluster, each refreshed from squeue/sacct while it has not been seen to end; when
    Slurm does not answer, the rest are listed as recorded and what it said goes to `unreachable`."""
    runs = Runs(home)
    found = []
    for run_id in job_record.cluster_run_ids(runs, cluster.name):
        record = load(home, run_id)
        if job_of(record).job_id and not job_of(record).ended and not unreachable:
            try:
                record = refresh(home, cluster, record)
            except slurm.SlurmUnreachable as exc:
                if unreachable is None:
                    raise
                unreachable.append(str(exc))
        found.append(record)
    return found


def refresh(home: Path, cluster: ClusterEntry, record: Record) -> Record:
    """The job's state now; a job seen to end for the first time says so in the record."""
    state = slurm.job_state(cluster, job_of(record).job_id)
    record = apply_state(record, state)
    if state.ended:
        record = with_event(
            record, f"{now()} seen ended {state.state} exit {state.exit_code or '?'} (from {state.source})"
        )
    return save(home, record)
