"""Rotating a resident deployment's keys so that an interruption at any moment leaves a true record: the
intent (`rotating`) is written first and the old keys kept; the engine restarts with the new ones; only
once it answers to them does the record name them. A rotation whose command is gone is finished (the
engine answers to the new keys) or undone (it still answers to the old ones) by the next command."""

from __future__ import annotations

import dataclasses
from typing import Any

from labctl.catalog.hosts_file import LOCAL_HOST, HostEntry
from labctl.catalog.http_contracts import contract_for
from labctl.catalog.lab import Lab
from labctl.errors import BadInput, LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.engine.probes import check_openai_api, status_with_key, status_without_key, wait_until_ready
from labctl.host.identity import process_alive, process_token
from labctl.run.records.record import Record, ResidentInfo, now
from labctl.run.records.store import Runs
from labctl.run.remote import ensure_forward
from labctl.run.resident.host_keys import put_keys
from labctl.run.resident.keys import MAX_KEYS, KeyStore, fingerprint, generate_keys, read_key_file
from labctl.run.resident.lockdown import check_locked, check_proxy_keys, reload_proxy
from labctl.run.resident.ownership import check_force, check_may_act
from labctl.run.resident.resident_plan import image_user_ids


def rotate_key(
    runs: Runs,
    run_id: str,
    by: str,
    key_file: str | None,
    keys: int | None,
    force: bool = False,
    reason: str | None = None,
    host: HostEntry = LOCAL_HOST,
    lab: Lab | None = None,
) -> ResidentInfo:
    """`lab`: where the engine's HTTP contract is, to measure what the rotated deployment leaves open."""
    check_force(force, reason)
    if key_file is not None and keys is not None:
        raise BadInput("give either --key-file FILE or --keys N, not both.")
    if keys is not None and not 1 <= keys <= MAX_KEYS:
        raise BadInput(f"--keys {keys}: give a number of keys from 1 to {MAX_KEYS}.")
    record = runs.load(run_id)
    resident = record.resident
    if not resident or not resident.keys:
        raise BadInput(f"run {run_id} is not a resident deployment with API keys.")
    if record.slurm is not None:  # restarting the engine inside a running job would end the job
        raise BadInput(
            f"run {run_id} is a Slurm job on cluster {record.slurm.cluster}: rotate-key is not supported there yet; "
            f"`labctl down {run_id}`, then `up` it again with --resident for new keys."
        )
    forced = check_may_act(run_id, record.owner, True, by, "rotating the keys of", force, reason)
    new_keys = read_key_file(key_file) if key_file else generate_keys(keys or resident.keys)
    if resident.proxy:
        check_proxy_keys(new_keys, f"--key-file {key_file}")
    unsettled = finish_rotation(runs, record, host)  # an earlier rotation cut short is settled first
    record = runs.load(run_id)
    resident = record.resident
    assert resident is not None
    if resident.rotating_since and not process_alive(resident.rotating_process):
        raise LabctlError(unsettled[0])  # the engine answers to neither key: nothing to rotate from
    containers = [c for c in dk.labctl_containers(run_id=run_id, all_states=False) if dk.service_of(c) == "serve"]
    if not containers:
        raise LabctlError(f"run {run_id} is not running: start it again before rotating its key.")
    store = KeyStore(runs.home)
    try:
        old_keys = store.read(run_id)
    except BadInput:  # the file was handed to the engine's own user: nothing is changed, nothing recorded
        raise LabctlError(
            f"the key file of run {run_id} cannot be read by {by}: only root can replace it "
            f"(sudo labctl rotate-key {run_id} ...)."
        ) from None
    store.keep_previous(run_id, old_keys)
    intent = dataclasses.replace(
        resident,
        rotating_since=now(),
        rotating_process=process_token(),
        rotating_by=by,
        rotating_to=tuple(fingerprint(k) for k in new_keys),
    )
    runs.update(run_id, resident=intent)
    base = _base(runs, record, host)
    _hand_to_engine(runs, record, new_keys, base, old_keys[0] if old_keys else None)
    if not resident.proxy:  # behind the proxy the engine keeps its own key: it serves on, with no restart
        _restart_engine(base, record, containers[0])
    check_openai_api(base, record.served_model_name, new_keys[0], None)
    if status_without_key(base) != 401:
        raise LabctlError(f"run {run_id} answers without a key after the rotation: stop it (labctl down {run_id}).")
    version = (record.resolved_profile or {}).get("engine_version")
    contract = contract_for(lab, record.engine, version) if lab else None
    lock = check_locked(base, contract, f"run {run_id} after the rotation (stop it: labctl down {run_id})")
    settled = _settle(runs, run_id, new_keys, by=by, forced=forced, reason=reason)
    if lock is None:
        return settled
    measured = dataclasses.replace(settled, open_paths=lock.open_paths, open_model_paths=lock.open_model_paths)
    runs.update(run_id, resident=measured)
    return measured


def _restart_engine(base: str, record: Record, serve: Any) -> None:
    with dk.docker_errors("restarting the engine with its new key"):
        dk.restart(serve)

    def watch() -> None:
        state = dk.container_state(serve)
        if not state["running"]:
            raise LabctlError(f"the engine {state['status']} after the key rotation (exit code {state['exit_code']})")

    wait_until_ready(base, record.probe, 900, watch, probe_timeout=record.probe_timeout_s)


def finish_rotation(runs: Runs, record: Record, host: HostEntry) -> list[str]:
    """A rotation whose `rotate-key` is gone: finished when the engine answers to the new keys, undone
    (the old keys back where the engine reads them) when it still answers to the old ones; otherwise said."""
    resident = record.resident
    if resident is None or not resident.rotating_since or process_alive(resident.rotating_process):
        return []
    run_id, store = record.run_id, KeyStore(runs.home)
    try:
        new_keys, old_keys = store.read(run_id), store.previous(run_id)
    except (BadInput, LabctlError) as exc:
        return [f"run {run_id}: a key rotation was interrupted and its keys cannot be read here ({exc})"]
    base = _base(runs, record, host)
    if new_keys and status_with_key(base, new_keys[0]) == 200 and status_without_key(base) == 401:
        _settle(runs, run_id, new_keys, by=resident.rotating_by or "", finished_by_status=True)
        return [f"finished the key rotation of run {run_id}: the engine runs with the new keys"]
    if old_keys and status_with_key(base, old_keys[0]) == 200:
        _hand_to_engine(runs, record, old_keys, base, new_keys[0] if new_keys else None)
        store.drop_previous(run_id)
        runs.update(run_id, resident=_cleared(resident))
        runs.event(run_id, "key rotation undone", reason="interrupted before the engine ran with the new keys")
        return [
            f"undid the interrupted key rotation of run {run_id}: the engine still runs with its old keys "
            f"(rotate again: labctl rotate-key {run_id})"
        ]
    return [
        f"run {run_id}: a key rotation was interrupted and the engine answers to neither key now; "
        f"run `labctl rotate-key {run_id}` again once it is up, or `labctl down {run_id}`"
    ]


def _settle(
    runs: Runs,
    run_id: str,
    keys: list[str],
    by: str,
    forced: bool = False,
    reason: str | None = None,
    finished_by_status: bool = False,
) -> ResidentInfo:
    """The engine answers to the new keys: only now does the record name them."""
    current = runs.load(run_id).resident
    assert current is not None
    fingerprints = tuple(fingerprint(k) for k in keys)
    resident = dataclasses.replace(_cleared(current), keys=len(keys), key_fingerprints=fingerprints, rotated_at=now())
    runs.update(run_id, resident=resident)
    extra = {"finished_by": "a later command (its rotate-key was gone)"} if finished_by_status else {}
    runs.event(
        run_id, "key rotation", by_user=by, key_fingerprints=list(fingerprints), forced=forced, reason=reason, **extra
    )
    KeyStore(runs.home).drop_previous(run_id)
    return resident


def _cleared(resident: ResidentInfo) -> ResidentInfo:
    return dataclasses.replace(resident, rotating_since=None, rotating_process=None, rotating_by=None, rotating_to=())


def _hand_to_engine(runs: Runs, record: Record, keys: list[str], base: str, replaced: str | None) -> None:
    """Where the engine reads its keys at its next start: the key file here, and on a remote host the copy in
    its key volume there. A proxy in front reads them at once, and refuses the `replaced` key before this returns."""
    KeyStore(runs.home).write(record.run_id, keys, image_user_ids(record.image.user))
    if record.resident is not None and record.resident.auth_volume:
        put_keys(record.run_id, keys, record.image)
    if record.resident is not None and record.resident.proxy:
        reload_proxy(record.run_id, base, replaced)


def _base(runs: Runs, record: Record, host: HostEntry) -> str:
    if host.is_remote and record.forward is not None:
        return ensure_forward(runs, record.run_id, host, record.forward).base
    return record.base_url.removesuffix("/v1")
