"""`labctl study run`: every (cell, repeat) in interleaved order (A1 B1 C1 A2 …). Hosts work in parallel,
one process each (a process drives one Docker host: the library points Docker and nvidia-smi at it
process-wide); inside a host's process, cells whose GPU sets are disjoint run side by side, one thread each
(lanes.py decides which may try; the on-host claims of `up` still decide who gets a GPU, a refusal being a
wait). On a Slurm cluster every (cell, repeat) is one job, submitted at once in the study's order, each
followed by a process of its own: they run as far in parallel as Slurm grants (labctl schedules nothing).
The report is rewritten after every finished cell, by the host's main thread."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import queue
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass

from labctl.catalog.lab import Lab
from labctl.errors import BadInput, LabctlError
from labctl.host.files.process_lock import take_process_lock
from labctl.host.identity import end_with_parent
from labctl.host.remote.hosts import activate
from labctl.run.backends.backend import StopRequest
from labctl.run.backends.kinds import backend_for
from labctl.run.records.record import now
from labctl.run.records.store import ENDED, Runs
from labctl.study.cell_run import CellContext, run_cell, should_skip
from labctl.study.lanes import Need, free_slot, need_of, startable
from labctl.study.plan import CellPlan, StudyPlan
from labctl.study.prefetch import Prefetcher, plan_steps
from labctl.study.state import StudyState

Say = Callable[[str], None]
WriteReport = Callable[[], None]


@dataclass(frozen=True)
class Outcome:
    measured: int
    reused: int
    interrupted: bool


def host_queues(plan: StudyPlan) -> dict[str, list[tuple[CellPlan, int]]]:
    queues: dict[str, list[tuple[CellPlan, int]]] = {}
    for cell, repeat in plan.order():
        if cell.cell.placement.kind == "host":
            queues.setdefault(cell.cell.host, []).append((cell, repeat))
    return queues


def cluster_jobs(plan: StudyPlan) -> list[tuple[CellPlan, int, int]]:
    """(cell, repeat, port) of every cell on a cluster: jobs may share a node, so each has its own port."""
    jobs = []
    stride = max(len(plan.hosts), 1)
    for k, (cell, repeat) in enumerate(c for c in plan.order() if c[0].cell.placement.kind == "cluster"):
        jobs.append((cell, repeat, cell.cell.profile.port + stride * k))
    return jobs


def run_job(
    lab: Lab, runs: Runs, plan: StudyPlan, state: StudyState, job: tuple[CellPlan, int, int], say: Say, redo: bool
) -> None:
    cell, repeat, port = job
    facts = plan.hosts[cell.cell.host]
    backend = backend_for(lab.root, cell.cell.host)
    ctx = CellContext(lab, runs, plan, state, facts.entry, say, redo_failed=redo, backend=backend)
    done = run_cell(ctx, cell, repeat, port)
    if done is not None:
        say(f"{cell.cell.key} r{repeat}: {done['state']}" + (f" (node {done['node']})" if done.get("node") else ""))


def run_host(
    lab: Lab, runs: Runs, plan: StudyPlan, state: StudyState, host: str, say: Say, report: WriteReport, redo: bool
) -> tuple[int, int]:
    entry = plan.hosts[host].entry
    activate(entry)  # once for the process: the cells' threads share it
    ctx = CellContext(lab, runs, plan, state, entry, say, redo_failed=redo)
    queue = host_queues(plan)[host]
    for cell, repeat in queue:
        _take_down_leftover(ctx, cell, repeat)
    todo = [(cell, repeat) for cell, repeat in queue if not _reusable(ctx, cell, repeat)]
    unique = list({cell.cell.key: cell for cell, _ in todo}.values())
    prefetch = Prefetcher(state, host, plan_steps(entry, unique, bool(plan.study.spec["fetch"]), say))
    ctx.prefetch = prefetch
    host_gpus = len(plan.hosts[host].gpus)
    needs = [need_of(cell.cell.key, cell.cell.profile) for cell, _ in todo]
    first = startable(needs, [], host_gpus)
    if first:  # before this host measures anything: what its first cells need
        prefetch.for_cells([todo[i][0].cell.key for i in first], "before the host measures")
    measured = _work_through(ctx, todo, needs, host_gpus, len(plan.hosts), report)
    return measured, len(queue) - len(todo)


def _work_through(
    ctx: CellContext,
    todo: list[tuple[CellPlan, int]],
    needs: list[Need],
    host_gpus: int,
    hosts: int,
    report: WriteReport,
) -> int:
    """Start every (cell, repeat) the GPU sets allow, in the study's order; a cell alone on its host runs in
    this thread (Ctrl-C reaches it directly), cells side by side each in a thread of their own."""
    pending = list(range(len(todo)))
    running: dict[int, tuple[threading.Thread, int]] = {}  # index -> (thread, port slot)
    finished: queue.Queue[tuple[int, BaseException | None]] = queue.Queue()
    measured = 0
    try:
        while pending or running:
            chosen = [
                pending[i] for i in startable([needs[i] for i in pending], [needs[i] for i in running], host_gpus)
            ]
            if chosen and not running and len(chosen) == 1:
                index = chosen[0]
                pending.remove(index)
                measured += _one(ctx, *todo[index], None, report)
                continue
            for index in chosen:
                pending.remove(index)
                slot = free_slot({s for _, s in running.values()})
                cell, repeat = todo[index]
                port = cell.cell.profile.port + slot * hosts  # hosts sharing one network keep apart
                thread = threading.Thread(
                    target=_in_thread, args=(ctx, cell, repeat, port, index, finished), name=cell.cell.key, daemon=True
                )
                running[index] = (thread, slot)
                thread.start()
            if not running:
                break  # nothing may start and nothing runs: cannot happen, but never spin
            index, error = _next_finished(finished)
            running.pop(index)[0].join()
            if isinstance(error, KeyboardInterrupt):
                raise error
            measured += 1
            report()
    except KeyboardInterrupt:
        for thread, _ in running.values():  # each takes its engine down and says so in its state
            _interrupt_thread(thread)
        for thread, _ in running.values():
            thread.join()
        raise
    return measured


def _one(ctx: CellContext, cell: CellPlan, repeat: int, port: int | None, report: WriteReport) -> int:
    done = run_cell(ctx, cell, repeat, port)
    if done is None:
        return 0
    ctx.say(f"{cell.cell.key} r{repeat}: {done['state']}")
    report()
    return 1


def _in_thread(
    ctx: CellContext,
    cell: CellPlan,
    repeat: int,
    port: int,
    index: int,
    finished: queue.Queue[tuple[int, BaseException | None]],
) -> None:
    error: BaseException | None = None
    try:
        done = run_cell(ctx, cell, repeat, port)
        if done is not None:
            ctx.say(f"{cell.cell.key} r{repeat}: {done['state']}")
    except BaseException as exc:  # noqa: BLE001 - the cell's state says what happened; the host goes on
        error = exc
    finished.put((index, error))


def _next_finished(finished: queue.Queue[tuple[int, BaseException | None]]) -> tuple[int, BaseException | None]:
    while True:  # a timeout, so that Ctrl-C is seen while the cells run
        try:
            return finished.get(timeout=0.5)
        except queue.Empty:
            continue


def _interrupt_thread(thread: threading.Thread) -> None:
    """A Ctrl-C reaches only the main thread: raise it in a cell's thread too (at its next Python step)."""
    if thread.ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt))


def _take_down_leftover(ctx: CellContext, cell: CellPlan, repeat: int) -> None:
    """A (cell, repeat) still `running` when this study run starts was left by one that died (this run holds
    the study's lock, so no other measures it): its engine is taken down and the cell redone."""
    stored = ctx.state.load_cell(cell.cell.key, repeat)
    if not stored or stored.get("state") != "running":
        return
    run_id, said = stored.get("run_id"), ""
    record = ctx.runs.try_load(run_id) if isinstance(run_id, str) else None
    if record is not None and record.status not in ENDED:
        request = StopRequest(run_id, reason="left by a study run that died", by=f"study {ctx.plan.study.name}")
        try:
            ctx.placer().stop(ctx.runs, request)
            said = f"; took down its run {run_id}"
        except LabctlError as exc:
            said = f"; taking down its run {run_id} failed: {exc}"
    stored.update(
        state="interrupted",
        level=None,
        finished_at=now(),
        failure={"class": "interrupted", "reason": "its study run was gone (killed); measured again"},
    )
    ctx.state.save_cell(stored)
    ctx.say(f"{cell.cell.key} #{repeat}: left running by a study run that is gone{said}; measured again")


def _reusable(ctx: CellContext, cell: CellPlan, repeat: int) -> bool:
    stored = ctx.state.load_cell(cell.cell.key, repeat)
    return should_skip(stored, cell.fingerprints[repeat - 1].digest, ctx.redo_failed)


def _job_child(
    lab: Lab,
    runs: Runs,
    plan: StudyPlan,
    state: StudyState,
    job: tuple[CellPlan, int, int],
    say: Say,
    redo: bool,
    parent: int,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _interrupt)
    end_with_parent(parent)  # a killed study run's workers stop (taking their engines down), never go on alone
    try:
        run_job(lab, runs, plan, state, job, say, redo)
    except KeyboardInterrupt:
        os._exit(130)
    except BaseException:  # noqa: BLE001 - the cell's state says what happened; the parent sees the exit code
        os._exit(1)
    os._exit(0)


def _child(
    lab: Lab,
    runs: Runs,
    plan: StudyPlan,
    state: StudyState,
    host: str,
    say: Say,
    report: WriteReport,
    redo: bool,
    parent: int,
) -> None:
    # Ctrl-C reaches the whole process group: the parent alone takes it and tells each host's process once,
    # by SIGTERM, so that no second signal lands in the middle of a take-down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _interrupt)
    end_with_parent(parent)  # a killed study run's workers stop (taking their engines down), never go on alone
    try:
        run_host(lab, runs, plan, state, host, say, report, redo)
    except KeyboardInterrupt:
        os._exit(130)
    except BaseException:  # noqa: BLE001 - the cells' states say what happened; the parent sees the exit code
        os._exit(1)
    os._exit(0)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_study(
    lab: Lab, runs: Runs, plan: StudyPlan, state: StudyState, say: Say, report: WriteReport, redo_failed: bool = False
) -> Outcome:
    if plan.refusals:
        raise BadInput(f"{plan.study.path}: the study cannot run here: {plan.refusals[0]}")
    # Held by this process and the workers it forks, for as long as any of them lives: one runner per study.
    lock = take_process_lock(state.folder / "run.lock", f"study {plan.study.name}", now())
    try:
        return _run_study(lab, runs, plan, state, say, report, redo_failed)
    finally:
        os.close(lock)


def _run_study(
    lab: Lab, runs: Runs, plan: StudyPlan, state: StudyState, say: Say, report: WriteReport, redo_failed: bool
) -> Outcome:
    queues = host_queues(plan)
    jobs = cluster_jobs(plan)
    before = {(c.get("cell"), c.get("repeat"), c.get("finished_at")) for c in state.all_cells()}
    if len(queues) == 1 and not jobs:
        host = next(iter(queues))
        try:
            measured, reused = run_host(lab, runs, plan, state, host, say, report, redo_failed)
        except KeyboardInterrupt:
            report()
            raise
        return Outcome(measured, reused, False)
    context = multiprocessing.get_context("fork")  # the child inherits the checked plan and the signal handlers
    children = [
        context.Process(
            target=_child, args=(lab, runs, plan, state, host, say, report, redo_failed, os.getpid()), name=host
        )
        for host in queues
    ]
    children += [
        context.Process(
            target=_job_child, args=(lab, runs, plan, state, job, say, redo_failed, os.getpid()), name=job[0].cell.key
        )
        for job in jobs
    ]
    for child in children:
        child.start()
    interrupted = False
    try:
        for child in children:
            child.join()
    except KeyboardInterrupt:
        interrupted = True
        for child in children:  # a SIGTERM sent to this process alone reaches the hosts' processes too
            if child.is_alive() and child.pid:
                os.kill(child.pid, signal.SIGTERM)
        for child in children:
            child.join()
    after = {(c.get("cell"), c.get("repeat"), c.get("finished_at")) for c in state.all_cells()}
    report()
    if interrupted or any(child.exitcode == 130 for child in children):
        raise KeyboardInterrupt("SIGINT")
    measured = len(after - before)
    return Outcome(measured, len(plan.order()) - measured, False)
