"""Claims on a host's GPUs and ports that live on the host itself: a created (never started) container
named `labctl-gpu-<uuid>` or `labctl-port-<port>`. Docker refuses a second container of one name on one
daemon, so taking a claim is atomic for every controller that drives the host, whichever machine it
runs on — the host-wide lock file only covers one controller machine.

A claim says who took it (run, owner, controller machine, home, the `labctl up` process) and until when
an `up` that has started nothing yet may hold it. A claim whose run has no container is stale when its
`up` is gone (same controller machine) or its deadline passed (another machine); it is then removed by
its container id, so a contender never removes a claim someone took a moment ago."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from labctl.host.docker import daemon as dk
from labctl.host.docker.daemon import DockerException, NoSuchContainer
from labctl.host.identity import host_name, process_alive

PREFIX = "labctl.claim."
RUN = PREFIX + "run_id"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class Claim:
    name: str
    what: str  # "GPU 0 (GPU-…)" or "port 18000"
    run_id: str
    owner: str
    controller: str
    home: str
    up_process: str
    claimed_at: str
    deadline: float  # epoch seconds: until then an `up` that started nothing yet may hold it
    container_id: str = ""

    def labels(self) -> dict[str, str]:
        return {
            RUN: self.run_id,
            PREFIX + "what": self.what,
            PREFIX + "owner": self.owner,
            PREFIX + "controller": self.controller,
            PREFIX + "home": self.home,
            PREFIX + "up_process": self.up_process,
            PREFIX + "claimed_at": self.claimed_at,
            PREFIX + "deadline": f"{self.deadline:.0f}",
        }

    @classmethod
    def from_labels(cls, name: str, container_id: str, labels: dict[str, str]) -> Claim:
        deadline = labels.get(PREFIX + "deadline", "0")
        return cls(
            name=name,
            what=labels.get(PREFIX + "what", name),
            run_id=labels.get(RUN, "?"),
            owner=labels.get(PREFIX + "owner", "?"),
            controller=labels.get(PREFIX + "controller", "?"),
            home=labels.get(PREFIX + "home", ""),
            up_process=labels.get(PREFIX + "up_process", ""),
            claimed_at=labels.get(PREFIX + "claimed_at", "?"),
            deadline=float(deadline) if deadline.isdigit() else 0.0,
            container_id=container_id,
        )

    def describe(self) -> str:
        return (
            f"run {self.run_id} (owner {self.owner}, controller {self.controller}, home {self.home or '?'}, "
            f"claimed {self.claimed_at})"
        )


def gpu_claim_name(uuid: str) -> str:
    return "labctl-gpu-" + _UNSAFE.sub("_", uuid)[:200]


def port_claim_name(port: int | str) -> str:
    return f"labctl-port-{port}"


def take(claim: Claim, image: str) -> Claim | None:
    """Create the claim container; None when it is ours now, else the claim that holds the name."""
    try:
        dk.client().container.create(
            image, ["true"], entrypoint="true", name=claim.name, labels=claim.labels(), networks=["none"]
        )
        return None
    except DockerException as exc:
        text = exc.stderr or str(exc)
        if "already in use" not in text and "Conflict" not in text:
            raise
    holder = find(claim.name)
    return holder or take(claim, image)  # it went away between our create and our look: try once more


def find(name: str) -> Claim | None:
    try:
        container = dk.client().container.inspect(name)
    except NoSuchContainer:
        return None
    except DockerException as exc:
        if "No such" in (exc.stderr or ""):
            return None
        raise
    return Claim.from_labels(name, str(container.id), dict(container.config.labels or {}))


def claims(run_id: str | None = None) -> list[Claim]:
    label = f"{RUN}={run_id}" if run_id else RUN
    with dk.docker_errors("listing GPU and port claims"):
        found = dk.client().container.list(all=True, filters={"label": label})
    return [Claim.from_labels(str(c.name), str(c.id), dk.labels_of(c)) for c in found]


def is_stale(claim: Claim) -> bool:
    if dk.labctl_containers(run_id=claim.run_id):
        return False  # its engine exists (running or not): `labctl down` releases it
    if claim.controller == host_name():
        return not process_alive(claim.up_process)
    return time.time() > claim.deadline


def remove(claim: Claim) -> None:
    """By container id: a claim taken under the same name a moment ago is never removed."""
    try:
        dk.client().container.remove(claim.container_id or claim.name, force=True)
    except DockerException as exc:
        if "No such" not in (exc.stderr or str(exc)):
            raise


def release(run_id: str) -> int:
    """Remove every claim a run holds on this host (at `down`, or when its `up` fails)."""
    held = claims(run_id)
    for claim in held:
        remove(claim)
    return len(held)
