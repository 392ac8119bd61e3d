"""Slurm's machine-readable output, parsed: `scontrol show node --oneliner`, `squeue -h -o` with a
separator, `sacct --parsable2`. Pure functions; host/slurm/commands.py runs the commands."""

from __future__ import annotations

import re
from dataclasses import dataclass

SEP = "|"
SQUEUE_FORMAT = SEP.join(("%i", "%T", "%r", "%N", "%l"))
SACCT_FIELDS = ("JobID", "State", "ExitCode", "NodeList", "Elapsed", "Reason")
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::[A-Za-z0-9_-]+)?:(\d+)")
_USED_IDX = re.compile(r"gpu(?::[A-Za-z0-9_-]+)?:\d+\(IDX:([0-9,\-N/A]+)\)")
_JOB_ID = re.compile(r"[0-9]{1,12}\Z")


@dataclass(frozen=True)
class Node:
    name: str
    state: str
    partitions: tuple[str, ...]
    gpus: int
    gpus_used: int

    @property
    def gpus_free(self) -> int:
        return 0 if self.unavailable else max(self.gpus - self.gpus_used, 0)

    @property
    def unavailable(self) -> bool:
        return any(word in self.state for word in ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING"))


@dataclass(frozen=True)
class JobState:
    """What Slurm says of one job. `source` names the command that said it (squeue, sacct, scontrol), or
    `unknown` when Slurm no longer knows the job and keeps no accounting."""

    job_id: str
    state: str
    reason: str = ""
    node: str = ""
    exit_code: str = ""
    time_limit: str = ""
    source: str = "unknown"

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def running(self) -> bool:
        return self.state in ("RUNNING", "COMPLETING", "CONFIGURING")

    @property
    def ended(self) -> bool:
        return not (self.pending or self.running or self.state in ("SUSPENDED", "REQUEUED", "RESIZING"))


def parse_job_id(text: str) -> str:
    """`sbatch --parsable` prints `ID` or `ID;CLUSTER`."""
    job_id = text.strip().partition(";")[0]
    if not _JOB_ID.match(job_id):
        raise ValueError(f"sbatch --parsable printed {text.strip()[:80]!r}, not a job id")
    return job_id


def expand_indexes(text: str) -> tuple[int, ...]:
    """Slurm's `0-1,3` -> (0, 1, 3)."""
    out: list[int] = []
    for part in text.split(","):
        if not part or part == "N/A":
            continue
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return tuple(out)


def _pairs(line: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for word in line.split():
        key, eq, value = word.partition("=")
        if eq:
            pairs[key] = value
    return pairs


def parse_nodes(text: str) -> list[Node]:
    """`scontrol show node --oneliner --details`: one line per node (`Gres=gpu:4`, `GresUsed=gpu:2` or
    `GresUsed=gpu:h100:2(IDX:0-1)`)."""
    nodes = []
    for line in text.splitlines():
        pairs = _pairs(line)
        if "NodeName" not in pairs:
            continue
        total = _GRES_GPU.search(pairs.get("Gres", ""))
        used = _GRES_GPU.search(pairs.get("GresUsed", ""))
        nodes.append(
            Node(
                pairs["NodeName"],
                pairs.get("State", "UNKNOWN"),
                tuple(p for p in pairs.get("Partitions", "").split(",") if p),
                int(total.group(1)) if total else 0,
                int(used.group(1)) if used else 0,
            )
        )
    return nodes


def parse_squeue(text: str) -> JobState | None:
    """`squeue -h -j ID -o SQUEUE_FORMAT`: nothing when Slurm's queue no longer holds the job."""
    for line in text.splitlines():
        fields = line.split(SEP)
        if len(fields) == 5:
            job_id, state, reason, node, limit = fields
            return JobState(job_id, state, "" if reason == "None" else reason, node, "", limit, "squeue")
    return None


def parse_sacct(text: str) -> JobState | None:
    """`sacct -n -X -P -j ID -o SACCT_FIELDS`: the allocation's own line."""
    for line in text.splitlines():
        fields = line.split(SEP)
        if len(fields) == len(SACCT_FIELDS):
            job_id, state, exit_code, node, _elapsed, reason = fields
            # sacct says `CANCELLED by 0`: the state is the first word.
            node = "" if node in ("None assigned", "(null)") else node
            return JobState(job_id, state.split()[0], "" if reason == "None" else reason, node, exit_code, "", "sacct")
    return None


def parse_scontrol_job(text: str) -> JobState | None:
    """`scontrol show job --oneliner ID`, while slurmctld still knows the job (no accounting needed)."""
    pairs = _pairs(text)
    if "JobId" not in pairs:
        return None
    node = pairs.get("NodeList", "")
    return JobState(
        pairs["JobId"],
        pairs.get("JobState", "UNKNOWN"),
        "" if pairs.get("Reason") == "None" else pairs.get("Reason", ""),
        "" if node == "(null)" else node,
        pairs.get("ExitCode", ""),
        pairs.get("TimeLimit", ""),
        "scontrol",
    )


def granted_gpus(text: str) -> tuple[int, ...]:
    """The GPU indexes in `scontrol show job --details` (`GRES=gpu:2(IDX:0-1)`): what Slurm granted."""
    match = _USED_IDX.search(text)
    return expand_indexes(match.group(1)) if match else ()
