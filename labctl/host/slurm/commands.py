"""Slurm's own commands, run for one cluster (locally with its SLURM_CONF, or on its login host over SSH):
one funnel that raises a LabctlError naming the command, its exit code and its stderr. labctl asks; Slurm
decides which node and which GPUs."""

from __future__ import annotations

import shlex
import subprocess

from labctl.catalog.clusters_file import ClusterEntry
from labctl.errors import LabctlError
from labctl.host.slurm.parse import (
    SACCT_FIELDS,
    SEP,
    SQUEUE_FORMAT,
    JobState,
    Node,
    granted_gpus,
    parse_job_id,
    parse_nodes,
    parse_sacct,
    parse_scontrol_job,
    parse_squeue,
)

TIMEOUT_S = 30.0


class SlurmError(LabctlError):
    pass


class SlurmUnreachable(SlurmError):
    """Slurm did not answer at all (the login host or slurmctld): never a job state, and never retried command
    after command."""


# How Slurm's client commands and ssh say that nobody answered (as opposed to a refusal about the job).
UNREACHABLE = ("Unable to contact slurm controller", "Connection refused", "Connection timed out",
               "No route to host", "Could not resolve hostname", "Connection closed by")  # fmt: skip


def run(cluster: ClusterEntry, argv: list[str], stdin: str | None = None) -> str:
    command = cluster.command_argv(argv)
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except FileNotFoundError as exc:
        raise SlurmError(
            f"cluster {cluster.name}: {exc.filename} not found (install Slurm's client commands)."
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmUnreachable(
            f"cluster {cluster.name}: {shlex.join(argv)} did not answer in {TIMEOUT_S:.0f} s."
        ) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        said = f"cluster {cluster.name}: {shlex.join(argv)} failed (exit {done.returncode}): {last}"
        if done.returncode == 255 or any(word in done.stderr for word in UNREACHABLE):  # 255: ssh's own failure
            raise SlurmUnreachable(said)
        raise SlurmError(said)
    return done.stdout


def nodes(cluster: ClusterEntry) -> list[Node]:
    found = parse_nodes(run(cluster, ["scontrol", "show", "node", "--oneliner", "--details"]))
    if cluster.partition:
        found = [n for n in found if cluster.partition in n.partitions]
    return found


def submit(cluster: ClusterEntry, options: list[str], script: str) -> str:
    """`sbatch --parsable OPTIONS` with the job script on stdin; the job id. Nothing secret goes in either:
    Slurm stores both."""
    try:
        return parse_job_id(run(cluster, ["sbatch", "--parsable", *options], stdin=script))
    except ValueError as exc:
        raise SlurmError(f"cluster {cluster.name}: {exc}") from None


def job_by_name(cluster: ClusterEntry, name: str) -> str | None:
    """The id of this user's queued or running job of that name (a submission whose answer was lost), if any."""
    try:
        found = run(cluster, ["squeue", "-h", "--me", "--name", name, "-o", "%i"]).split()
    except SlurmError:
        return None
    return found[0] if len(found) == 1 and found[0].isdigit() else None


def job_state(cluster: ClusterEntry, job_id: str) -> JobState:
    """squeue while the job is queued or running; then sacct (accounting); then scontrol while slurmctld
    still remembers it; else the state is unknown."""
    try:
        queued = parse_squeue(run(cluster, ["squeue", "-h", "-j", job_id, "-o", SQUEUE_FORMAT]))
    except SlurmUnreachable:
        raise  # nobody answered: the job's state is not known, and asking sacct and scontrol too only takes longer
    except SlurmError:
        queued = None  # squeue exits 1 for a job id slurmctld has already forgotten
    if queued is not None and not queued.ended:
        return queued
    try:
        ended = parse_sacct(
            run(cluster, ["sacct", "-n", "-X", "-P", "--delimiter", SEP, "-j", job_id, "-o", ",".join(SACCT_FIELDS)])
        )
    except SlurmUnreachable:
        raise
    except SlurmError:
        ended = None  # no accounting on this cluster
    if ended is not None:
        return ended
    try:
        shown = parse_scontrol_job(run(cluster, ["scontrol", "show", "job", "--oneliner", job_id]))
    except SlurmUnreachable:
        raise
    except SlurmError:
        shown = None
    return shown or JobState(job_id, "UNKNOWN")


def job_gpus(cluster: ClusterEntry, job_id: str) -> tuple[int, ...]:
    return granted_gpus(run(cluster, ["scontrol", "show", "job", "--details", "--oneliner", job_id]))


def cancel(cluster: ClusterEntry, job_id: str) -> None:
    run(cluster, ["scancel", job_id])
