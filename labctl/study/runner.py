"""`labctl study run`: every (cell, repeat) in interleaved order (A1 B1 C1 A2 …). Each host works through
its own cells one at a time; hosts work in parallel, one process each (a process drives one Docker host: the
library points Docker and nvidia-smi at it process-wide). Who gets a GPU is decided by the on-host claims,
as for any `up`. On a Slurm cluster every (cell, repeat) is one job, submitted at once in the study's order,
each followed by a process of its own: they run as far in parallel as Slurm grants (labctl schedules nothing).
The report is rewritten after every finished cell."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass

from labctl.catalog.lab import Lab
from labctl.errors import BadInput
from labctl.host.hosts import activate
from labctl.run.records.store import Runs
from labctl.study.cell_run import CellContext, run_cell, should_skip
from labctl.study.plan import CellPlan, StudyPlan
from labctl.study.prefetch import prefetch_host
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
    ctx = CellContext(lab, runs, plan, state, facts.entry, say, redo_failed=redo, cluster=facts.cluster)
    done = run_cell(ctx, cell, repeat, port)
    if done is not None:
        say(f"{cell.cell.key} r{repeat}: {done['state']}" + (f" (node {done['node']})" if done.get("node") else ""))


def run_host(
    lab: Lab, runs: Runs, plan: StudyPlan, state: StudyState, host: str, say: Say, report: WriteReport, redo: bool
) -> tuple[int, int]:
    entry = plan.hosts[host].entry
    activate(entry)
    ctx = CellContext(lab, runs, plan, state, entry, say, redo_failed=redo)
    queue = host_queues(plan)[host]
    waiting = [cell for cell, repeat in queue if not _reusable(ctx, cell, repeat)]
    if waiting:  # before this host measures anything: never a pull beside its own measurement
        prefetch_host(state, entry, list({id(c): c for c in waiting}.values()), bool(plan.study.spec["fetch"]), say)
    measured = reused = 0
    for cell, repeat in queue:
        done = run_cell(ctx, cell, repeat)
        if done is None:
            reused += 1
            continue
        measured += 1
        say(f"{cell.cell.key} r{repeat}: {done['state']}")
        report()
    return measured, reused


def _reusable(ctx: CellContext, cell: CellPlan, repeat: int) -> bool:
    stored = ctx.state.load_cell(cell.cell.key, repeat)
    return should_skip(stored, cell.fingerprints[repeat - 1].digest, ctx.redo_failed)


def _job_child(
    lab: Lab, runs: Runs, plan: StudyPlan, state: StudyState, job: tuple[CellPlan, int, int], say: Say, redo: bool
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        run_job(lab, runs, plan, state, job, say, redo)
    except KeyboardInterrupt:
        os._exit(130)
    except BaseException:  # noqa: BLE001 - the cell's state says what happened; the parent sees the exit code
        os._exit(1)
    os._exit(0)


def _child(
    lab: Lab, runs: Runs, plan: StudyPlan, state: StudyState, host: str, say: Say, report: WriteReport, redo: bool
) -> None:
    # Ctrl-C reaches the whole process group: the parent alone takes it and tells each host's process once,
    # by SIGTERM, so that no second signal lands in the middle of a take-down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _interrupt)
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
        context.Process(target=_child, args=(lab, runs, plan, state, host, say, report, redo_failed), name=host)
        for host in queues
    ]
    children += [
        context.Process(target=_job_child, args=(lab, runs, plan, state, job, say, redo_failed), name=job[0].cell.key)
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
