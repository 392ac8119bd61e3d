"""One engine run on a Slurm cluster: render here, submit a batch job, wait while Slurm queues it (the wait is
its own prep part, never cold start), then readiness on the node Slurm chose; down cancels the job and waits
until its containers are gone; gc finds containers whose job has ended. Slurm alone chooses the node and the
GPUs: labctl reads them back (squeue, sacct, scontrol) and records them in the run's record (its `slurm`
block, see cluster_record)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
from labctl.host.slurm.clusters import ClusterEntry
from labctl.host.slurm.job_script import JOB_LABEL, cluster_compose, job_script, sbatch_options
from labctl.host.slurm.parse import JobState
from labctl.run.lifecycle import cluster_record
from labctl.run.lifecycle.cluster_record import ClusterRecord
from labctl.run.lifecycle.down import project_name
from labctl.run.records.record import ContainerInfo, ImageInfo, now
from labctl.run.records.store import Runs, new_run_id
from labctl.run.resident.host_keys import file_owner, fill_image
from labctl.run.resident.keys import KeyStore, generate_keys

Say = Callable[[str], None]
JOB_COMPOSE = "job-compose.yaml"  # what the job starts: compose.yaml with device_ids left to Slurm
POLL_S = 0.5


def save(home: Path, record: ClusterRecord) -> None:
    cluster_record.save(Runs(home), record)


def load(home: Path, run_id: str) -> ClusterRecord:
    return cluster_record.load(Runs(home), run_id)


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


def submit_run(
    lab: Lab,
    home: Path,
    cluster: ClusterEntry,
    engine: str,
    profile_name: str,
    *,
    gpus: int | None = None,
    port: int | None = None,
    minutes: int | None = None,
    cpus: int | None = None,
    mem_mib: int | None = None,
    allow_unpinned: bool = False,
    docker_bin: str = "docker",
    keys: int = 0,
    profile: Profile | None = None,
) -> ClusterRecord:
    """Render, write the run's folder, and `sbatch --parsable`. Nothing secret goes into the job. A reproduction
    gives its pinned `profile` instead of a profile name's."""
    profile = with_overrides(profile or load_profile(lab, engine, profile_name), port=port)
    if not profile.pinned and not allow_unpinned:
        raise BadInput(f"profile {engine}/{profile_name} is not pinned by digest: pin it, or pass --allow-unpinned.")
    count = gpus if gpus is not None else max(profile.gpu_count, 1)
    if not 1 <= count <= 64:
        raise BadInput(f"--gpus {count}: a job asks for 1 to 64 GPUs.")
    if profile.engine.needs_gpu:  # the setup runs on N GPUs; which ones is Slurm's to say
        profile = Profile(profile.engine, profile.name, {**profile.spec, "gpus": {"count": count}}, profile.source)
    limit = minutes or cluster.time_minutes
    run_id = new_run_id()
    folder = home / "runs" / run_id
    setup_text, labels = render_for_cluster(lab, cluster, profile, run_id, home, keys=keys > 0)
    compose_text = cluster_compose(setup_text, count)  # the GPUs are Slurm's to grant: the job fills device_ids
    runs = Runs(home)
    runs.make_dir(run_id)
    write_atomically(folder / "compose.yaml", setup_text)
    write_atomically(folder / JOB_COMPOSE, compose_text)
    if keys:
        KeyStore(home).write(run_id, generate_keys(keys))
    volume = ready_volume(run_id) if keys else None
    script = job_script(run_id, project_name(run_id), compose_text, cluster.nodes, docker_bin, volume)
    options = sbatch_options(
        run_id=run_id,
        engine=engine,
        profile=profile_name,
        gpus=count,
        minutes=limit,
        cpus=cpus or profile.cpus,
        mem_mib=mem_mib or profile.memory_mib,
        partition=cluster.partition,
        account=cluster.account,
        qos=cluster.qos,
        output=str(folder / "job.log"),
    )
    record = ClusterRecord(
        run_id,
        cluster.name,
        engine,
        profile_name,
        port=profile.port,
        gpus_requested=count,
        time_limit_min=limit,
        submitted_at=now(),
        cpus=cpus or profile.cpus,
        mem_mib=mem_mib or profile.memory_mib,
        simulated=cluster.simulated,
        needs_gpu=profile.engine.needs_gpu,
        resident_keys=keys,
    )
    runs.save(cluster_record.base_record(lab, runs, record, profile, labels, project_name(run_id)))
    record.job_id = slurm.submit(cluster, options, script)
    record.events.append(f"{now()} submitted job {record.job_id}")
    save(home, record)
    return record


def wait_running(home: Path, cluster: ClusterEntry, record: ClusterRecord, say: Say, timeout: float) -> ClusterRecord:
    """Poll until Slurm runs the job (or ends it). Says each new state and reason: `pending: Resources`."""
    t0 = time.monotonic()
    seen = ""
    while True:
        state = slurm.job_state(cluster, record.job_id)
        shown = f"{state.state.lower()}" + (f": {state.reason}" if state.reason else "")
        if shown != seen:
            say(f"job {record.job_id} {shown}")
            record.events.append(f"{now()} {shown}")
            seen = shown
        if state.running or state.ended:
            break
        if time.monotonic() - t0 > timeout:
            raise LabctlError(f"job {record.job_id} still {shown} after {timeout:.0f} s: `labctl` left it queued.")
        time.sleep(POLL_S)
    record.queue_wait_s = round(time.monotonic() - t0, 3)
    apply_state(record, state)
    if state.running:
        record.node = state.node
        record.docker = cluster.node(record.node).docker
        record.gpu_indexes = list(slurm.job_gpus(cluster, record.job_id))
        record.gpu_uuids = node_gpu_uuids(cluster, record.node, record.gpu_indexes)
    save(home, record)
    return record


def apply_state(record: ClusterRecord, state: JobState) -> None:
    record.state, record.reason, record.state_source = state.state, state.reason, state.source
    record.exit_code = state.exit_code or record.exit_code
    record.node = record.node or state.node


def ready_volume(run_id: str) -> str:
    return key_volume.volume_name(run_id) + "-filled"


def deliver_keys(home: Path, cluster: ClusterEntry, record: ClusterRecord, image: str) -> None:
    """The run's keys into its key volume on the node Slurm chose, over Docker's transport (stdin of a
    throwaway container), never through Slurm; the waiting job then starts the engine."""
    facts = dk.image_facts(image)
    info = ImageInfo(reference=image, user=facts.user if facts else "")
    text = (KeyStore(home).folder(record.run_id) / "api_key").read_text(encoding="utf-8")
    with dk.on_endpoint(cluster.node(record.node).docker):
        key_volume.write_keys(record.run_id, text, fill_image(info), file_owner(info))
        # The job waits for this second, empty volume: the key volume exists before it is filled.
        with dk.docker_errors("marking the key volume filled"):
            dk.client().volume.create(ready_volume(record.run_id), labels={key_volume.LABEL: record.run_id})
    record.events.append(f"{now()} keys delivered to {record.node}")
    save(home, record)


def note_image(lab: Lab, home: Path, cluster: ClusterEntry, record: ClusterRecord, profile: Profile) -> None:
    """The image the node's Docker ran, by digest and id (what `reproduce` pulls elsewhere, and the setup's
    hash), and the engine's command line as Docker reports it."""
    with dk.on_endpoint(cluster.node(record.node).docker):
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
    serve = [c for c in node_containers(cluster, record.node, record.job_id) if dk.service_of(c) == "serve"]
    container = (
        ContainerInfo(serve[0].name, serve[0].id, tuple(dk.command_line(serve[0])), profile.env_names)
        if serve
        else None
    )
    Runs(home).update(
        record.run_id, image=image, setup=cluster_record.setup_hash(lab, profile, digest), container=container
    )


def node_gpu_uuids(cluster: ClusterEntry, node: str, indexes: list[int]) -> list[str]:
    by_index = {g.index: g.uuid for g in list_gpus(cluster.node(node).nvidia_smi_argv())}
    return [by_index.get(str(i), "") for i in indexes]


def wait_ready(home: Path, cluster: ClusterEntry, record: ClusterRecord, probe: str, timeout: float) -> Forward | None:
    """The engine on the node Slurm chose answers: directly when the node's loopback is this machine's, else
    through a managed SSH forward, as for any SSH host."""
    node = cluster.node(record.node)
    forward = None
    base = f"http://127.0.0.1:{record.port}"
    if node.is_remote:
        forward = open_forward(node, "127.0.0.1", record.port, home / "runs" / record.run_id / "forward.log")
        base = forward.base
    t0 = time.monotonic()

    def watch() -> None:
        state = slurm.job_state(cluster, record.job_id)
        if state.ended:
            raise LabctlError(f"job {record.job_id} ended ({state.state}) before the engine answered.")

    try:
        wait_until_ready(base, probe, timeout, watch)
    except BaseException:
        close_forward(forward)
        raise
    record.ready_s = round(time.monotonic() - t0, 3)
    save(home, record)
    return forward


def node_containers(cluster: ClusterEntry, node: str, job_id: str | None = None) -> list[Any]:
    return dk.labelled_containers(cluster.node(node).docker, f"{JOB_LABEL}={job_id}" if job_id else JOB_LABEL)


def take_down(home: Path, cluster: ClusterEntry, record: ClusterRecord, timeout: float = 60.0) -> ClusterRecord:
    """scancel, then wait until Slurm says the job ended and its containers are gone from the node."""
    slurm.cancel(cluster, record.job_id)
    record.events.append(f"{now()} scancel")
    deadline = time.monotonic() + timeout
    while True:
        state = slurm.job_state(cluster, record.job_id)
        node = record.node or state.node
        left = node_containers(cluster, node, record.job_id) if node else []
        if state.ended and not left:
            break
        if time.monotonic() > deadline:
            raise LabctlError(
                f"job {record.job_id}: still {state.state} with {len(left)} container(s) after {timeout:.0f} s."
            )
        time.sleep(POLL_S)
    return finish(home, cluster, record)


def finish(home: Path, cluster: ClusterEntry, record: ClusterRecord) -> ClusterRecord:
    """The job's final state and exit code, from sacct when the cluster keeps accounting; a resident run's
    key volume and key store copy are removed."""
    state = slurm.job_state(cluster, record.job_id)
    if record.resident_keys and record.node:
        with dk.on_endpoint(cluster.node(record.node).docker):
            key_volume.remove(record.run_id)
            dk.remove_volume(ready_volume(record.run_id), "key volume marker")
        KeyStore(home).remove(record.run_id)
    apply_state(record, state)
    record.events.append(f"{now()} ended {state.state} exit {state.exit_code or '?'} (from {state.source})")
    save(home, record)
    return record


def leftovers(cluster: ClusterEntry) -> list[tuple[str, str, str]]:
    """(node, container id, job id) for every labctl container whose Slurm job has ended: after a node failure
    or a SIGKILL the container, Docker's process, can outlive its job."""
    found = []
    for node in sorted(cluster.nodes):
        for container in node_containers(cluster, node):
            job_id = dk.labels_of(container).get(JOB_LABEL, "")
            if not job_id or slurm.job_state(cluster, job_id).ended:
                found.append((node, container.id, job_id))
    return found


def remove_leftovers(cluster: ClusterEntry) -> list[tuple[str, str, str]]:
    gone = leftovers(cluster)
    for node, container_id, _job in gone:
        dk.remove_container_on(cluster.node(node).docker, container_id)
    return gone


def forget(home: Path, run_id: str) -> None:
    shutil.rmtree(home / "runs" / run_id, ignore_errors=True)


def up_on_cluster(
    lab: Lab,
    home: Path,
    cluster: ClusterEntry,
    engine: str,
    profile_name: str,
    say: Say,
    *,
    gpus: int | None = None,
    port: int | None = None,
    minutes: int | None = None,
    allow_unpinned: bool = False,
    timeout: float = 900.0,
    keys: int = 0,
    profile: Profile | None = None,
) -> ClusterRecord:
    """Submit, wait while Slurm queues the job, then wait until the engine answers on the node Slurm chose.
    A failure or Ctrl-C cancels the job: nothing is left queued or running unaccounted."""
    profile = profile or load_profile(lab, engine, profile_name)
    record = submit_run(
        lab,
        home,
        cluster,
        engine,
        profile_name,
        gpus=gpus,
        port=port,
        minutes=minutes,
        allow_unpinned=allow_unpinned,
        keys=keys,
        profile=profile,
    )
    say(f"submitted job {record.job_id} to cluster {cluster.name} (run {record.run_id})")
    try:
        wait_running(home, cluster, record, say, timeout)
        if record.state != "RUNNING":
            finish(home, cluster, record)
            raise LabctlError(
                f"job {record.job_id} ended {record.state} before it ran (see {home}/runs/{record.run_id}/job.log)."
            )
        if keys:
            deliver_keys(home, cluster, record, profile.image_text)
        forward = wait_ready(home, cluster, record, profile.engine.readiness.probe, timeout)
        note_image(lab, home, cluster, record, profile)
    except BaseException:
        take_down(home, cluster, record)
        raise
    record.base_url = (forward.base if forward else f"http://127.0.0.1:{record.port}") + "/v1"
    record.forward = forward
    save(home, record)
    return record


def down_on_cluster(home: Path, cluster: ClusterEntry, record: ClusterRecord) -> ClusterRecord:
    close_forward(record.forward)
    return take_down(home, cluster, record)


def cluster_runs(home: Path, cluster: ClusterEntry) -> list[ClusterRecord]:
    """This home's runs on the cluster, each refreshed from squeue/sacct while it has not been seen to end."""
    runs = Runs(home)
    found = []
    for run_id in cluster_record.cluster_run_ids(runs, cluster.name):
        record = load(home, run_id)
        if record.job_id and not record.ended:
            refresh(home, cluster, record)
        found.append(record)
    return found


def refresh(home: Path, cluster: ClusterEntry, record: ClusterRecord) -> ClusterRecord:
    """The job's state now; a job seen to end for the first time says so in the record."""
    state = slurm.job_state(cluster, record.job_id)
    apply_state(record, state)
    if state.ended:
        record.events.append(f"{now()} seen ended {state.state} exit {state.exit_code or '?'} (from {state.source})")
    save(home, record)
    return record
