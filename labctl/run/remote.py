"""A run on a remote (ssh://) host: its GPUs and port claimed on the host itself, and the SSH forward that
makes its base URL answer on the controller. Ownership across controllers is advisory: the remote account
is shared, and a claim records the controller's OS user and machine, which another controller trusts."""

from __future__ import annotations

import time
from pathlib import Path

from labctl.catalog.hosts_file import HostEntry
from labctl.errors import Conflict
from labctl.host.docker import daemon as dk
from labctl.host.gpus import claims
from labctl.host.gpus.inventory import Gpu
from labctl.host.identity import host_name, process_token
from labctl.host.remote import key_volume
from labctl.host.remote import ports as remote_ports
from labctl.host.remote.forward import Forward, close_forward, open_forward
from labctl.host.watcher import on_remote as remote_watch
from labctl.run.records.record import now
from labctl.run.records.store import Runs

# An `up` that has started nothing yet (pulling, building) holds its claims this long past its own timeout
# before another controller machine may call them stale.
CLAIM_GRACE_S = 600.0


def take_claims(
    host: HostEntry,
    run_id: str,
    owner: str,
    home: Path,
    gpu_ids: list[str],
    found: list[Gpu],
    port: int,
    bind: str,
    image: str,
    timeout: float,
) -> list[str]:
    """Claim each GPU (by UUID) and the port on the host, all or nothing; Conflict (exit 3) names the holder.
    The port's claim is the port's on every address of the host (an engine on 0.0.0.0 holds it on all), and
    says which address the run binds. Returns what was done with stale claims of a `labctl up` that is gone."""
    by_index = {g.index: g for g in found}
    wanted = [
        (claims.gpu_claim_name(by_index[i].uuid), f"GPU {i} ({by_index[i].uuid})") for i in gpu_ids if i in by_index
    ]
    wanted.append((claims.port_claim_name(port), f"port {port} on {bind}"))
    notes: list[str] = []
    taken: list[claims.Claim] = []
    for name, what in wanted:
        mine = claims.Claim(
            name=name,
            what=what,
            run_id=run_id,
            owner=owner,
            controller=host_name(),
            home=str(home),
            up_process=process_token(),
            claimed_at=now(),
            deadline=time.time() + timeout + CLAIM_GRACE_S,
        )
        holder = claims.take(mine, image)
        if holder is not None and claims.is_stale(holder):
            claims.remove(holder)
            notes.append(f"removed the stale claim on {what} of run {holder.run_id} (its labctl up was gone)")
            holder = claims.take(mine, image)
        if holder is not None:
            for claim in taken:
                claims.remove(claim)
            raise Conflict(
                f"{what} on host {host.name} is claimed by {holder.describe()}. Ownership across controllers is "
                f"advisory: ask its owner, or free it with: labctl --host {host.name} down {holder.run_id}."
            )
        taken.append(claims.find(name) or mine)
    return notes


def check_port_free(host: HostEntry, bind: str, port: int) -> str | None:
    """Conflict (exit 3) when a process labctl did not start listens where the engine would bind on the host
    (labctl's own runs hold port claims, checked before); a note when the host's ports cannot be read."""
    found = remote_ports.listeners(host)
    if found is None:
        return f"could not read {host.name}'s listening ports over SSH: port {port} was not checked there"
    holder = remote_ports.holds(found, bind, port)
    if holder is not None:
        raise Conflict(
            f"port {port} on {host.name} is in use ({holder}) by a process labctl did not start. Pick another with "
            f"--port N (or see what holds it: {' '.join(host.ssh_argv())} ss -ltnp 'sport = :{port}')."
        )
    return None


def release_claims(run_id: str) -> int:
    return claims.release(run_id)


def stale_claims() -> list[str]:
    """Claims on the active host left by a `labctl up` that is gone and started nothing: removed."""
    done = []
    for claim in claims.claims():
        if claims.is_stale(claim):
            claims.remove(claim)
            done.append(f"removed the stale claim on {claim.what} of run {claim.run_id} (its labctl up was gone)")
    return done


def stale_run_volumes() -> list[str]:
    """Key and watch volumes on the active host whose run has neither a container nor a claim (a killed `up`
    between writing them and starting, whose claims were reconciled since): removed. A run being started
    holds its claims from before its volumes are made until `down`."""
    done = []
    found = [(n, r, key_volume.volume_name, key_volume.remove) for n, r in key_volume.key_volumes().items()]
    found += [(n, r, remote_watch.volume_name, remote_watch.remove) for n, r in watch_volumes().items()]
    for name, run_id, named, remove in found:
        if name != named(run_id) or dk.labctl_containers(run_id=run_id) or claims.claims(run_id):
            continue
        if dk.watchers(run_id):
            continue  # its watcher goes first (status removes a watcher whose run is gone)
        remove(run_id)
        kind = "key" if named is key_volume.volume_name else "watch"
        done.append(f"removed the {kind} volume {name} of run {run_id} (nothing of that run is left on the host)")
    return done


def watch_volumes() -> dict[str, str]:
    with dk.docker_errors("listing watch volumes"):
        found = dk.client().volume.list(filters={"label": dk.WATCH_LABEL})
    return {str(v.name): str((v.labels or {}).get(dk.WATCH_LABEL, "")) for v in found}


def open_run_forward(
    runs: Runs, run_id: str, host: HostEntry, bind: str, port: int, keep: int | None = None
) -> Forward:
    return open_forward(host, bind, port, runs.dir(run_id) / "forward.log", local_port=keep)


def ensure_forward(runs: Runs, run_id: str, host: HostEntry, forward: Forward) -> Forward:
    """A remote run's forward, reopened (on the same local port when it is free) if it died, e.g. after the
    controller rebooted; the record follows."""
    if forward.alive:
        return forward
    remote_host, _, remote_port = forward.remote.rpartition(":")
    fresh = open_run_forward(runs, run_id, host, remote_host, int(remote_port), keep=forward.local_port)
    record = runs.try_load(run_id)
    if record is not None:
        from dataclasses import replace

        runs.update(run_id, forward=fresh, endpoint=replace(record.endpoint, base_url=fresh.base + "/v1"))
        runs.event(run_id, "forward reopened", local_port=fresh.local_port)
    return fresh


def close_run_forward(forward: Forward | None) -> bool:
    return close_forward(forward)
