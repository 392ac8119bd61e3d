"""Taking a run down: its logs saved beside the record first, its containers removed, its record
and events told who stopped it and why, its keys deleted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labctl.catalog.hosts_file import LOCAL_HOST, HostEntry
from labctl.compose.labels import RunLabels
from labctl.errors import BadInput, LabctlError, describe_error
from labctl.host.docker import daemon as dk
from labctl.host.files.atomic import write_atomically
from labctl.host.identity import current_user, process_token
from labctl.run.lifecycle.live import live_runs
from labctl.run.records.record import now
from labctl.run.records.store import RUN_FILE_MODE, STOPPING, Runs, is_run_id
from labctl.run.remote import close_run_forward, release_claims
from labctl.run.resident import remote_watch, watch
from labctl.run.resident.host_keys import remove_keys
from labctl.run.resident.keys import KeyStore
from labctl.run.resident.ownership import check_force, check_may_act


def project_name(run_id: str) -> str:
    return f"labctl-{run_id}"


def save_logs(runs: Runs, run_id: str) -> str | None:
    """Keep the engine's logs beside the record before the container goes away. Best effort: a full disk or
    a vanished container never keeps an engine on its GPU. Returns what could not be saved."""
    try:
        for container in dk.labctl_containers(run_id=run_id):
            service = dk.service_of(container) or "serve"
            text = dk.read_logs(container, 100_000)
            if text is not None:  # saved even when empty: an engine that printed nothing before it stopped
                write_atomically(runs.dir(run_id) / f"{service}.log", text, RUN_FILE_MODE)
    except (OSError, LabctlError) as exc:
        return f"run {run_id}: its engine logs were not saved ({describe_error(exc)}); it was stopped all the same"
    return None


def owning_runs(runs: Runs, run_id: str) -> Runs:
    """The store that holds a run's record: this home, or the home its containers' labels name (a `down`
    from another home updates the owner's record, not nobody's)."""
    if runs.exists(run_id):
        return runs
    for container in dk.labctl_containers(run_id=run_id):
        home = RunLabels.from_labels(dk.labels_of(container)).home
        if home and Runs(Path(home)).exists(run_id):
            return Runs(Path(home))
    return runs


def stop_run(
    runs: Runs, run_id: str, by: str, reason: str | None = None, replaced_by: str | None = None, forced: bool = False
) -> list[str]:
    """Stop a run's containers (found by their `labctl.run_id` label) and record it. The record says
    `stopping` first (who, why, and this process), then everything goes, then it says `stopped`: a `down`
    killed midway leaves a record that tells the next `status` or `down` to finish the job. A record that
    cannot be read or written never keeps the containers up: they are stopped all the same, and what could
    not be recorded is returned, one line each."""
    problems: list[str] = []
    owner_runs = owning_runs(runs, run_id)
    said = False
    if owner_runs.exists(run_id):
        intent: dict[str, Any] = {"status": STOPPING, "stopped_by": by, "down_process": process_token()}
        if reason:
            intent["stop_reason"] = reason
        if replaced_by:
            intent["replaced_by"] = replaced_by
        if forced:
            intent["stop_forced"] = True
        said = not _best_effort(problems, unrecorded(run_id), owner_runs.update, run_id, **intent)
        elsewhere = {"from_home": str(runs.home)} if owner_runs.home != runs.home else {}
        _best_effort(problems, "", owner_runs.event, run_id, "down", reason=reason, forced=forced, **elsewhere)
    resident = take_down(owner_runs, run_id, problems)
    finish_stop(owner_runs, run_id, resident, problems, said_unrecorded=said)
    return problems


def take_down(runs: Runs, run_id: str, problems: list[str]) -> bool:
    """A run's watcher, then (its logs saved, best effort) its containers. Returns whether it was resident
    (or can no longer say: no container is left to tell)."""
    containers = dk.labctl_containers(run_id=run_id)
    resident = any(RunLabels.from_labels(dk.labels_of(c)).resident for c in containers) or not containers
    # The watcher goes first: the engine going away is no restart and no hang.
    if resident:
        record = runs.try_load(run_id)
        watched = record is not None and record.resident is not None and bool(record.resident.watcher)
        if watched and record is not None and record.docker_endpoint.startswith("ssh://"):
            _best_effort(problems, "", remote_watch.collect, runs, record)  # what it saw, before it goes
        watch.remove(run_id)
    if containers and runs.exists(run_id):
        problems += [p for p in [save_logs(runs, run_id)] if p]
    if containers:
        dk.compose_down(dk.labels_of(containers[0]).get("com.docker.compose.project", project_name(run_id)))
    return resident


def finish_stop(
    runs: Runs,
    run_id: str,
    resident: bool,
    problems: list[str],
    ending: dict[str, Any] | None = None,
    said_unrecorded: bool = False,
) -> None:
    """What a stopped run leaves behind goes (keys, volumes on its host, claims, the forward), then the
    record says how it ended (`stopped` unless `ending` says otherwise). Also how a later command finishes
    a `down` that was interrupted, or an `up` that is gone."""
    # A remote resident run's keys live in a volume on its host; the record may be another home's.
    keys_removed = resident and remove_keys(run_id)
    if resident:
        remote_watch.remove_volume(run_id)
    released = release_claims(run_id)
    record = runs.try_load(run_id)
    forward_closed = record is not None and close_run_forward(record.forward)
    try:
        KeyStore(runs.home).remove(run_id)  # a stopped deployment's keys open nothing any more
    except LabctlError as exc:
        problems.append(str(exc))
    if record is None:
        return
    done = {"status": "stopped", **(ending or {}), "stopped_at": now(), "down_process": None}
    _best_effort([] if said_unrecorded else problems, unrecorded(run_id), runs.update, run_id, **done)
    for event, fields in (
        ("key volume removed", {} if keys_removed else None),
        ("claims released", {"count": released} if released else None),
        ("forward closed", {} if forward_closed else None),
    ):
        if fields is not None:
            _best_effort(problems, "", runs.event, run_id, event, **fields)


def unrecorded(run_id: str) -> str:
    return f"stopped run {run_id}, but could not record it"


def _best_effort(problems: list[str], what: str, action: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
    """Record keeping that must never keep an engine on its GPU: a full disk or an unreadable record is said
    (when `what` says how), and the stop goes on. Returns whether it was done."""
    try:
        action(*args, **kwargs)
    except (OSError, LabctlError) as exc:
        if what:
            problems.append(f"{what} ({describe_error(exc)})")
        return False
    return True


@dataclass(frozen=True)
class Stopped:
    run_id: str
    engine: str
    profile: str
    problems: tuple[str, ...] = ()  # what could not be recorded (an unreadable record)
    detail: str = ""  # how it ended, where the backend knows more (a Slurm job's state and exit code)


def stop(
    runs: Runs,
    target: str | None,
    reason: str | None,
    force: bool,
    all_: bool = False,
    confirm: Callable[[list[dict[str, Any]]], bool] | None = None,
    host: HostEntry = LOCAL_HOST,
) -> list[Stopped]:
    """`labctl down [RUN_ID|ENGINE]`: which runs, whether you may, then stop each."""
    check_force(force, reason)
    if all_ and target is not None and is_run_id(target):
        raise BadInput(f"--all stops every run of one engine, and {target} is one run: drop --all, or name the engine.")
    live = live_runs(runs, probe=False, host=host)
    me = current_user()
    if target is None:  # only ever one of your own runs of this home: never a colleague's, mid-benchmark
        chosen = [r for r in live if r["owner"] == me and r["home"] == str(runs.home)]
        if len(chosen) > 1:
            raise BadInput(
                "several of your runs are up: name one (labctl down RUN_ID). Up now: "
                + ", ".join(f"{r['run_id']} ({r['engine']}/{r['profile']})" for r in chosen)
            )
        if not chosen and live:
            raise BadInput(
                f"none of your runs in this home ({runs.home}) is up; up on this host: "
                + ", ".join(f"{r['run_id']} ({r['owner'] or 'unknown owner'}, home {r['home'] or '?'})" for r in live)
                + ". To stop one of those, name it: labctl down RUN_ID."
            )
    elif is_run_id(target):
        chosen = [r for r in live if r["run_id"] == target]
        if not chosen and runs.exists(target):
            raise BadInput(f"run {target} is not up (its record says {runs.load(target).status}).")
    else:  # an engine name: only your own runs of this home, and more than one only when asked
        chosen = [r for r in live if r["engine"] == target and r["owner"] == me and r["home"] == str(runs.home)]
        if len(chosen) > 1 and not (all_ or (confirm is not None and confirm(chosen))):
            listed = ", ".join(r["run_id"] for r in chosen)
            raise BadInput(f"{target} matches {len(chosen)} of your runs ({listed}): name one, or pass --all.")
    if not chosen:
        raise BadInput(f"nothing to stop{' matching ' + repr(target) if target else ''}: see `labctl status`.")
    allowed = [
        (run, check_may_act(run["run_id"], run["owner"], run["resident"], me, "stopping", force, reason))
        for run in chosen
    ]
    stopped = []
    for run, forced in allowed:
        problems = stop_run(runs, run["run_id"], by=me, reason=reason, forced=forced)
        stopped.append(Stopped(run["run_id"], run["engine"], run["profile"], tuple(problems)))
    return stopped
