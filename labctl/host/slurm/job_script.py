"""The batch job that runs one labctl run on a Slurm cluster, as text: the sbatch options and the job script.
Pure. The job script renders nothing: the compose file was rendered by labctl before submission and travels
inside the script; the script only maps the GPUs Slurm granted (SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES)
to the compose file's device_ids, starts the engine with the node's Docker, and stops it when Slurm ends the
job (scancel, time limit, preemption all send SIGTERM first). No key ever appears here or in --export:
Slurm stores both."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import yaml

from labctl.catalog.clusters_file import ClusterEntry
from labctl.catalog.hosts_file import HostEntry
from labctl.errors import BadInput

JOB_LABEL = "labctl.slurm.job"
GPU_VARIABLE = "LABCTL_GPU_{}"
JOB_VARIABLE = "LABCTL_SLURM_JOB"
EOF_MARK = "LABCTL_COMPOSE_EOF"


def refuse_end_marker(compose_text: str) -> None:
    """The compose file travels inside the job script up to a marker line: a value holding the marker is refused
    (before anything is written), never allowed to end the file early and run the rest as shell."""
    if EOF_MARK in compose_text:
        raise BadInput(
            f"a value of this profile (extra_args, env, …) holds {EOF_MARK}, the line that ends the compose file in "
            "labctl's Slurm job script: remove it. Nothing was written or submitted."
        )


def cluster_compose(text: str, gpus: int) -> str:
    """The rendered compose file with its GPU request left to Slurm: device_ids become `${LABCTL_GPU_K}`, which
    the job sets from the GPUs granted, and the engine carries the job id as a label (gc and the Epilog find it
    by that). Every other `$` in a rendered file is already escaped as `$$`."""
    doc: dict[str, Any] = yaml.safe_load(text)
    service = doc["services"]["serve"]
    service.setdefault("labels", {})[JOB_LABEL] = "${" + JOB_VARIABLE + "}"
    if gpus > 0:
        ids = ["${" + GPU_VARIABLE.format(k) + "}" for k in range(gpus)]
        devices = [{"driver": "nvidia", "device_ids": ids, "capabilities": ["gpu"]}]
        service.setdefault("deploy", {}).setdefault("resources", {})["reservations"] = {"devices": devices}
    return yaml.safe_dump(doc, sort_keys=True, default_flow_style=False)


def node_docker(node: HostEntry) -> str:
    """The node's Docker as the job sees it on the node itself: its socket (an ssh:// entry is how labctl
    reaches the node from outside)."""
    return node.docker if node.docker.startswith("unix://") else f"unix://{node.socket}"


@dataclass(frozen=True)
class BatchJob:
    """One run's sbatch request: what it runs, what it asks Slurm for, and where its log goes."""

    run_id: str
    engine: str
    profile: str
    gpus: int
    minutes: int
    output: str
    cpus: int | None = None
    mem_mib: int | None = None


def sbatch_options(job: BatchJob, cluster: ClusterEntry) -> list[str]:
    """The job's sbatch options: what the run asks for, where the cluster sends its jobs."""
    options = [
        "--no-requeue",  # a requeued engine would start twice
        f"--job-name=labctl-{job.run_id}",
        f"--comment=labctl run {job.run_id} {job.engine}/{job.profile}",
        f"--gres=gpu:{job.gpus}",
        f"--time={job.minutes}",
        "--nodes=1",
        "--ntasks=1",
        f"--output={job.output}",
        "--export=PATH,HOME",  # never the whole environment: Slurm stores it, and it may hold a key
    ]
    options += [f"--cpus-per-task={job.cpus}"] if job.cpus else []
    options += [f"--mem={job.mem_mib}M"] if job.mem_mib else []
    options += [f"--partition={cluster.partition}"] if cluster.partition else []
    options += [f"--account={cluster.account}"] if cluster.account else []
    options += [f"--qos={cluster.qos}"] if cluster.qos else []
    return options


def job_script(
    run_id: str,
    project: str,
    compose_text: str,
    nodes: dict[str, HostEntry],
    docker_bin: str,
    key_volume: str | None = None,
) -> str:
    """`key_volume`: a resident run's keys reach the node's Docker only after Slurm has chosen the node, written
    by labctl into the run's key volume over Docker's own transport; the job waits for this volume (made once
    the keys are written) and never sees a key."""
    refuse_end_marker(compose_text)
    cases = "\n".join(
        f"  {name}) DOCKER_HOST={shlex.quote(node_docker(node))} ;;" for name, node in sorted(nodes.items())
    )
    docker = shlex.quote(docker_bin)
    wait_keys = ""
    if key_volume:
        volume = shlex.quote(key_volume)
        wait_keys = (
            f"n=0\nuntil {docker} volume inspect {volume} >/dev/null 2>&1; do\n"
            f"  n=$((n + 1)); [ $n -le 300 ] || {{ echo 'labctl: no key volume after 300 s' >&2; exit 3; }}\n"
            "  sleep 1 & wait $!\ndone\n"
        )
    return f"""#!/bin/sh
# labctl run {run_id}: the engine labctl rendered, on the GPUs Slurm granted, through this node's Docker.
set -u
case "${{SLURMD_NODENAME:-}}" in
{cases}
  *) echo "labctl: node ${{SLURMD_NODENAME:-?}} is not in the hosts file" >&2; exit 2 ;;
esac
export DOCKER_HOST
export {JOB_VARIABLE}="$SLURM_JOB_ID"
gpus="${{SLURM_JOB_GPUS:-${{CUDA_VISIBLE_DEVICES:-}}}}"
i=0
for g in $(echo "$gpus" | tr ',' ' '); do export "LABCTL_GPU_$i=$g"; i=$((i + 1)); done
dir=$(mktemp -d)
cat >"$dir/compose.yaml" <<'{EOF_MARK}'
{compose_text.rstrip()}
{EOF_MARK}
compose() {{ {docker} compose -p {shlex.quote(project)} -f "$dir/compose.yaml" "$@"; }}
stop() {{ compose down --timeout 3 >/dev/null 2>&1; rm -rf "$dir"; exit 143; }}
trap stop TERM INT
echo "labctl: job $SLURM_JOB_ID on $SLURMD_NODENAME, GPUs $gpus"
{wait_keys}compose up -d --no-deps serve || {{ compose down >/dev/null 2>&1; rm -rf "$dir"; exit 1; }}
id=$(compose ps -q serve)
while [ "$({docker} inspect -f '{{{{.State.Running}}}}' "$id" 2>/dev/null)" = true ]; do sleep 2 & wait $!; done
code=$({docker} inspect -f '{{{{.State.ExitCode}}}}' "$id" 2>/dev/null || echo 1)
[ "$code" = 0 ] || compose logs --no-color --tail 40 serve >&2
compose down --timeout 3 >/dev/null 2>&1
rm -rf "$dir"
exit "$code"
"""
