"""What `status` puts right on a host before it reports: state changes whose command is gone finished or
undone (an `up` killed while starting, a `down` killed while stopping, a key rotation cut short), engines
that Docker will not restart recorded with what to run next, and every live resident run given its restart
watcher. Each thing done is returned as one line."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
from typing import Any

from labctl.catalog.hosts_file import LOCAL_HOST, HostEntry
from labctl.catalog.specs import Readiness
from labctl.errors import BadInput, LabctlError, describe_error
from labctl.host.docker import daemon as dk
from labctl.host.engine.probes import probe_now
from labctl.host.identity import process_alive
from labctl.run.lifecycle.down import finish_stop, take_down
from labctl.run.records.record import Record
from labctl.run.records.store import STOPPING, Runs
from labctl.run.remote import ensure_forward, stale_claims, stale_run_volumes
from labctl.run.resident import remote_watch, watch
from labctl.run.resident.lockdown import PROXY_SERVICE as PROXY
from labctl.run.resident.rotation import finish_rotation

ADOPTED_REASON = "adopted: its labctl up was gone, the engine was healthy"
ABORTED_REASON = "its labctl up was gone before the engine was ready"


def reconcile(runs: Runs, host: HostEntry = LOCAL_HOST, unrecorded: list[str] | None = None) -> list[str]:
    """Finish or undo what interrupted commands left and record what happened outside labctl; what it found
    but could not write (a full disk, a home it may not write) goes to `unrecorded`, never into a note that
    says it was recorded."""
    done, resident = [], []
    for run_id in runs.all_ids():
        try:
            record = runs.load(run_id)
        except BadInput:
            continue  # a corrupt record is reported by `labctl runs`, never fatal here
        if record.host_entry != host.name:
            continue
        try:
            done += _reconcile_one(runs, host, record)
        except OSError as exc:
            said = (
                f"run {run_id}: status found its record out of date but could not record it "
                f"({describe_error(exc)}); the record still says {record.status}. Free space (or fix the home's "
                "permissions) and run labctl status again."
            )
            if unrecorded is None:
                raise LabctlError(said) from None
            unrecorded.append(said)
        if record.resident is not None:
            resident.append(run_id)
    done += _missing_watchers(runs, host, resident)
    done += watch.reconcile_watchers(runs)  # before the volumes: a watcher's volume is in use until it goes
    return done + (stale_claims() + stale_run_volumes() if host.is_remote else [])


def _reconcile_one(runs: Runs, host: HostEntry, record: Record) -> list[str]:
    if record.status == "starting" and not process_alive(record.up_process):
        return [_abandoned_up(runs, host, record)]
    if record.status == STOPPING and not process_alive(record.down_process):
        return [_interrupted_down(runs, record)]
    if record.status in ("running", "exited"):
        return _engine_outside_labctl(runs, record) + finish_rotation(runs, record, host)
    return []


def _abandoned_up(runs: Runs, host: HostEntry, record: Record) -> str:
    """A record left `starting` by a `labctl up` that is gone (SIGKILL, a crash, a lost machine): a healthy
    engine is adopted, anything else is taken down; on a remote host its claims go too."""
    run_id = record.run_id
    serve = _serve(run_id, all_states=False)
    if serve is not None and _probe_record(runs, host, record) == "healthy":
        runs.update(run_id, status="running", reason=ADOPTED_REASON)
        runs.event(run_id, "adopted")
        return f"adopted {run_id}: its labctl up was gone, the engine answers"
    problems: list[str] = []
    resident = take_down(runs, run_id, problems)
    ending = {"status": "aborted", "reason": ABORTED_REASON}
    finish_stop(runs, run_id, resident or record.resident is not None, problems, ending)
    runs.event(run_id, "aborted", reason="labctl up gone")
    return f"aborted {run_id}: its labctl up was gone; whatever it started was taken down"


def _interrupted_down(runs: Runs, record: Record) -> str:
    """A `labctl down` that wrote `stopping` and was killed before it finished: finish it."""
    problems: list[str] = []
    resident = take_down(runs, record.run_id, problems)
    finish_stop(runs, record.run_id, resident or record.resident is not None, problems)
    who = f" (by {record.stopped_by})" if record.stopped_by else ""
    left = f"; {'; '.join(problems)}" if problems else ""
    return f"finished stopping {record.run_id}: its labctl down{who} was interrupted{left}"


def _engine_outside_labctl(runs: Runs, record: Record) -> list[str]:
    """An engine stopped in a way Docker will not restart (`docker stop`, `docker kill`, a crash without a
    restart policy) or removed by hand: the record says so, with what to run next; one started again by
    hand is running again."""
    run_id = record.run_id
    serve = _serve(run_id, all_states=True)
    if serve is None and record.status == "running":
        if record.docker_host_id and record.docker_host_id != dk.daemon_facts().id:
            return []  # another daemon than the one that ran it answers here: nothing can be concluded
        outside = {"stop_reason": "its containers were removed outside labctl", "stopped_by": "(outside labctl)"}
        finish_stop(runs, run_id, record.resident is not None, [], outside)
        runs.event(run_id, "engine gone", reason="containers removed outside labctl")
        return [f"run {run_id}: its containers were removed outside labctl; recorded as stopped"]
    if serve is None:
        return []
    state = dk.container_state(serve)
    if state["running"] and record.status == "exited":
        runs.update(run_id, status="running", reason="started again outside labctl")
        runs.event(run_id, "engine started again", how="outside labctl")
        return [f"run {run_id}: its engine runs again (started outside labctl)"]
    if state["running"] and record.status == "running" and record.resident and record.resident.proxy:
        return _proxy_outside_labctl(runs, record)
    if state["status"] != "exited" or record.status == "exited":
        return []  # running, or restarting: Docker's restart policy is at work
    reason = (
        f"the engine exited and Docker will not restart it; labctl did not stop it. Docker says: "
        f"{exit_facts(state)}. `labctl down {run_id}` frees its port and GPU claims; "
        f"`docker start {serve.name}` serves again"
    )
    runs.update(run_id, status="exited", reason=reason)
    runs.event(
        run_id,
        "engine exited",
        exit_code=state["exit_code"],
        oom_killed=state["oom_killed"],
        finished_at=state["finished_at"],
        restart="not by Docker",
    )
    return [f"run {run_id}: {reason}"]


def _proxy_outside_labctl(runs: Runs, record: Record) -> list[str]:
    """The engine runs but the authenticating proxy in front of it is gone: nobody reaches the engine with a key,
    so the run is recorded like an engine that died (and `share` warns instead of handing out its URL)."""
    run_id = record.run_id
    proxy = _serve(run_id, all_states=True, service=PROXY)
    state = dk.container_state(proxy) if proxy is not None else {"status": "removed", "running": False}
    if state["running"] or state["status"] == "restarting":
        return []
    if state["status"] == "removed":
        facts, again = "it was removed", f"`labctl down {run_id}` and `labctl up` again serve anew"
    else:
        facts, again = f"Docker says: {exit_facts(state)}", f"`docker start {proxy.name}` serves again"
    reason = (
        f"its authenticating proxy is not running and Docker will not restart it, so nobody reaches the engine "
        f"behind it; labctl did not stop it. {facts}. `labctl down {run_id}` frees its port and GPU claims; {again}"
    )
    runs.update(run_id, status="exited", reason=reason)
    runs.event(run_id, "proxy exited", exit_code=state.get("exit_code"), oom_killed=state.get("oom_killed"))
    return [f"run {run_id}: {reason}"]


def _missing_watchers(runs: Runs, host: HostEntry, run_ids: list[str]) -> list[str]:
    """Every live resident run of this home on this host (`run_ids`) has its restart watcher: one removed by
    hand, or never started (an `up` killed before it, an adopted run), is started again."""
    done = []
    for run_id in run_ids:
        record = runs.try_load(run_id)  # read again: adopted or ended a moment ago
        if record is None or record.status != "running" or record.resident is None:
            continue
        if record.resident.watcher_note and not record.resident.watcher:
            continue  # none can run here, and the record says why
        serve = _serve(run_id, all_states=False)
        if serve is None or dk.watchers(run_id):
            continue
        watch.replay(runs, record)  # restarts no watcher saw are recorded as status's, before one watches again
        resident = record.resident
        readiness = Readiness(
            record.probe,
            record.probe_timeout_s,
            resident.watch_interval_s or Readiness.watch_interval_s,
            resident.hung_after_failures or Readiness.hung_after_failures,
        )
        try:
            if host.is_remote:
                name, note = remote_watch.start(runs, record, readiness, str(serve.name), host, dk.daemon_facts().id)
            else:
                name, note = watch.start(runs, record, readiness, str(serve.name))
        except (OSError, LabctlError) as exc:
            done.append(f"run {run_id} has no restart watcher and none could be started: {describe_error(exc)}")
            continue
        runs.update(run_id, resident=dataclasses.replace(resident, watcher=name, watcher_note=note))
        runs.event(run_id, "watcher started", by_command="status", note=note)
        done.append(f"started the restart watcher of run {run_id} (it had none)" if name else f"run {run_id}: {note}")
    return done


def _serve(run_id: str, all_states: bool, service: str = "serve") -> Any:
    containers = dk.labctl_containers(run_id=run_id, all_states=all_states)
    return next((c for c in containers if dk.service_of(c) == service), None)


def _probe_record(runs: Runs, host: HostEntry, record: Record) -> str:
    if host.is_remote and record.forward is not None:
        base = ensure_forward(runs, record.run_id, host, record.forward).base
    else:
        base = record.base_url.removesuffix("/v1")
    return probe_now(base, record.probe, record.probe_timeout_s)


def exit_facts(state: dict[str, Any]) -> str:
    """What Docker knows of how a container ended, never who ended it: `exit code 137 (SIGKILL), not
    OOMKilled, at 2026-12-07T01:02:03`."""
    code = state.get("exit_code")
    said = f"exit code {code}"
    if isinstance(code, int) and 128 < code < 128 + 65:
        with contextlib.suppress(ValueError):
            said += f" ({signal.Signals(code - 128).name})"
    said += ", OOMKilled (the kernel's out-of-memory killer)" if state.get("oom_killed") else ", not OOMKilled"
    if state.get("error"):
        said += f", error: {str(state['error'])[:200]}"
    if state.get("finished_at"):
        said += f", at {state['finished_at']}"
    return said
