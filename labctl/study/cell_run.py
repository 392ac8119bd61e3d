"""One (cell, repeat) of a study: up, a canary at the lowest level, the ladder, the suites, down — through the
library's own up, bench, eval and down. Every failure is classified and kept with the engine's logs; the
cell's state is written at each step, and whatever happens the engine is taken down."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from labctl.bench.bench_request import BenchRequest
from labctl.bench.result_store import save_result
from labctl.bench.results import BenchResult, find_result, list_results
from labctl.bench.session import run_bench
from labctl.bench.workloads import with_overrides
from labctl.catalog.engines import lab_batch_caps, lab_telemetry
from labctl.catalog.hosts_file import HostEntry
from labctl.catalog.lab import Lab
from labctl.errors import Conflict, LabctlError, describe_error
from labctl.host.identity import host_name, process_token
from labctl.quality.evaluate import run_eval
from labctl.quality.lm_eval_run import run_lm_eval
from labctl.run.backends.backend import Backend, StopRequest
from labctl.run.backends.docker.docker_host import DockerHost
from labctl.run.lifecycle.up_plan import UpRequest
from labctl.run.records.record import Record, now
from labctl.run.records.store import Runs
from labctl.study.failures import classify_start, engine_state, meets_slo
from labctl.study.fingerprint import Fingerprint
from labctl.study.plan import CellPlan, StudyPlan, TaskSuite
from labctl.study.prefetch import Prefetcher
from labctl.study.prompt_budget import bench_starts
from labctl.study.state import FINISHED, StudyState

Say = Callable[[str], None]
CLAIM_POLL_S = 5.0  # how often a cell whose GPUs another run holds asks again (the on-host claim decides)


@dataclass
class CellContext:
    lab: Lab
    runs: Runs
    plan: StudyPlan
    state: StudyState
    host: HostEntry
    say: Say
    redo_failed: bool = False
    backend: Backend | None = None  # where the cells' runs go (None: the host's Docker); a cluster: one job each
    prefetch: Prefetcher | None = None  # the host's pending pulls, run between levels

    def placer(self) -> Backend:
        return self.backend or DockerHost(self.host)


def should_skip(stored: dict[str, Any] | None, digest: str, redo_failed: bool) -> bool:
    """Only a finished (cell, repeat) whose fingerprint still matches is reused."""
    if not stored or stored.get("fingerprint_digest") != digest:
        return False
    return stored.get("state") in FINISHED and not (redo_failed and stored.get("state") == "failed")


def written_by(result: BenchResult, tag: dict[str, Any], process: str) -> bool:
    """Whether a cell's own bench wrote the result: `process` wrote it, and it names no other study or cell (a
    bench someone ran by hand on the cell's engine, or one left by another study, is not the cell's)."""
    said = result.data.get("study")
    mine = said is None or (isinstance(said, dict) and all(said.get(k) == v for k, v in tag.items()))
    return mine and (result.writer or {}).get("process") == process


@contextmanager
def _signals_held() -> Iterator[None]:
    """A second Ctrl-C or SIGTERM cannot cut a take-down short (as `up` does when it cleans up)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class CellRun:
    def __init__(self, ctx: CellContext, cell: CellPlan, repeat: int, port: int | None = None) -> None:
        self.ctx, self.cell, self.repeat = ctx, cell, repeat
        self.port = port or cell.cell.profile.port  # cells running at once (a cluster, disjoint GPUs): own ports
        self.gap_s = 0.0  # seconds of its measuring its GPU spent waiting for a pull between levels
        self.fingerprint = cell.fingerprints[repeat - 1]
        study = ctx.plan.study
        self.tag = {"study": study.name, "cell": cell.cell.key, "repeat": repeat}
        self.data: dict[str, Any] = {
            "cell": cell.cell.key,
            "repeat": repeat,
            "host": cell.cell.host,
            "state": "running",
            "level": "up",
            "fingerprint": self.fingerprint.fields,
            "fingerprint_digest": self.fingerprint.digest,
            "run_id": None,
            "benches": [],
            "evals": [],
            "censored": {},
            "failure": None,
            "findings": [],
            "caveats": [],
            "times": {"cold_start_s": 0.0, "measuring_s": 0.0, "waiting_s": 0.0, "queue_wait_s": 0.0},
            "gpus": max(cell.cell.profile.gpu_count, 1) if cell.cell.profile.engine.needs_gpu else 0,
            "port": self.port,
            "started_at": now(),
            "finished_at": None,
            "runner": {"process": process_token(), "host": host_name()},  # who measures it: dead means interrupted
        }
        previous = ctx.state.load_cell(cell.cell.key, repeat)
        if (
            previous
            and previous.get("fingerprint_digest")
            and previous["fingerprint_digest"] != self.fingerprint.digest
        ):
            self.data["redone_because"] = self.fingerprint.changed(previous.get("fingerprint"))
        self.run_id: str | None = None  # the run this (cell, repeat) started, kept for its logs
        self.record: Record | None = None  # that run as it answered
        self.engine_up = False

    def save(self, **changes: Any) -> None:
        self.data.update(changes)
        self.ctx.state.save_cell(self.data)

    def fail(self, kind: str, reason: str) -> None:
        logs = None
        if self.run_id:
            path = self.ctx.runs.dir(self.run_id) / "serve.log"
            logs = str(path) if path.is_file() else None
        self.data["failure"] = {"class": kind, "reason": reason.splitlines()[0][:500], "logs": logs}
        self.ctx.say(f"{self.cell.cell.key} r{self.repeat}: {kind}: {reason.splitlines()[0][:200]}")

    # --- the steps -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.save()
        try:
            if not self.cell.fits:
                self.fail("start: memory", f"does not fit {self.cell.fit_target} (the plan's memory-fit estimate)")
                return self.finish("failed")
            record = self.start()
            if record is None:
                return self.finish("failed")
            with self.on_run_host():
                ok = self.measure(record)
            return self.finish("done" if ok else "failed")
        except KeyboardInterrupt as exc:
            self.fail("interrupted", f"interrupted ({exc.args[0] if exc.args else 'Ctrl-C'})")
            self.finish("interrupted")
            raise
        except Exception as exc:  # a bug or a full disk in one cell never stops the others
            self.fail("error", describe_error(exc))
            return self.finish("failed")

    def finish(self, state: str) -> dict[str, Any]:
        if self.engine_up:
            with _signals_held():
                self.data["caveats"].extend(self.take_down())
        self.save(state=state, level=None, finished_at=now())
        return self.data

    def take_down(self) -> list[str]:
        assert self.run_id is not None
        run_id, self.engine_up = self.run_id, False
        if self.ctx.runs.exists(run_id) and self.ctx.runs.load(run_id).status in ("stopped", "failed", "aborted"):
            return []
        request = StopRequest(run_id, reason=f"study cell {self.tag['cell']}", by=f"study {self.tag['study']}")
        try:
            stopped = self.ctx.placer().stop(self.ctx.runs, request)
        except LabctlError as exc:
            return [f"taking run {run_id} down: {exc}"]
        return [problem for run in stopped for problem in run.problems]

    def start(self) -> Record | None:
        ctx, profile = self.ctx, self.cell.cell.profile
        study = ctx.plan.study
        backend = ctx.placer()
        request = UpRequest(
            engine=profile.engine.name,
            profile=profile.name,
            profile_override=profile,
            port=self.port,
            timeout=float(study.spec["timeout_s"]),
            allow_unpinned=bool(study.spec["allow_unpinned"]),
            fetch=bool(study.spec["fetch"]),
            host=ctx.host,
            home=ctx.runs.home,
        )
        flaked = backend.queues  # a queued job is not retried: its scheduler said why it ended
        waited = pulled = 0.0
        if backend.queues:
            self.save(level="queued")
        if ctx.prefetch is not None:  # what this cell needs and the host has not pulled yet: never beside a level
            pulled = ctx.prefetch.for_cells([self.cell.cell.key], f"before {self.cell.cell.key} r{self.repeat}")
            self.data["times"]["waiting_s"] = round(pulled, 3)
        while True:
            before = set(ctx.runs.all_ids())
            t0 = time.monotonic()
            try:
                record = backend.start(ctx.lab, ctx.runs, request, say=lambda _line: None)
            except Conflict as exc:  # another run holds the GPUs or the port: the claim decides, the cell waits
                new = self.new_runs(before)
                if waited >= study.spec["timeout_s"]:
                    self.run_id = max(new) if new else None
                    self.fail("start: waiting", str(exc))
                    return None
                self.save(level="waiting for the GPUs")
                time.sleep(CLAIM_POLL_S)
                waited += time.monotonic() - t0
                self.data["times"]["waiting_s"] = round(pulled + waited, 3)
                continue
            except LabctlError as exc:
                new = self.new_runs(before)
                self.run_id = max(new) if new else None
                kind, flake = classify_start(str(exc))
                if flake and not flaked:  # a pull or SSH flake: once more
                    flaked = True
                    self.data["caveats"].append(f"retried once after: {str(exc).splitlines()[0][:200]}")
                    self.run_id = None
                    continue
                self.fail(kind, str(exc))  # `up` took down whatever it started, its logs saved
                return None
            self.run_id, self.engine_up, self.record = record.run_id, True, record
            queued = record.prep["queue_wait"].seconds if "queue_wait" in record.prep else 0.0
            self.data["times"]["queue_wait_s"] = queued
            self.data["times"]["cold_start_s"] = round(time.monotonic() - t0 - queued, 3)
            if record.timings.cold_start_s is not None:  # the engine's own: its container's start to its first answer
                self.data["times"]["engine_cold_start_s"] = record.timings.cold_start_s
            self.data.update(backend.placed_facts(record))
            self.note_image(record)
            ctx.runs.event(record.run_id, "study", **self.tag)
            self.save(run_id=record.run_id, level="canary")
            return record

    @property
    def bench_host(self) -> HostEntry | None:
        """The host the run is on: for a cluster cell the node Slurm chose, so that, as `labctl bench` does for
        that run, the client runs on an SSH node beside the engine and GPU samples come from that node."""
        return self.ctx.placer().run_host(self.record) if self.record is not None else None

    @contextmanager
    def on_run_host(self) -> Iterator[None]:
        """The cell's Docker calls (the bench client, the engine's state after a failed level) go to the daemon
        its run is on (a cluster cell's node); a host's cell is already on its host's."""
        if self.record is None:
            yield
            return
        with self.ctx.placer().on_run_host(self.record):
            yield

    def new_runs(self, before: set[str]) -> set[str]:
        """The runs this cell's `up` created (another cell of the host may start runs at the same time)."""
        found = set()
        for run_id in set(self.ctx.runs.all_ids()) - before:
            try:
                if self.ctx.runs.load(run_id).endpoint.port == self.port:
                    found.add(run_id)
            except (LabctlError, OSError, ValueError):
                continue
        return found

    def note_image(self, record: Record) -> None:
        """An unpinned image is known only once it is on the host: the fingerprint keeps the image that ran."""
        profile = self.cell.cell.profile
        ran = profile.image_digest or record.image.image_id
        if ran and ran != self.fingerprint.fields["image"]:
            self.fingerprint = Fingerprint({**self.fingerprint.fields, "image": ran})
            self.data.update(fingerprint=self.fingerprint.fields, fingerprint_digest=self.fingerprint.digest)

    def measure(self, record: Record) -> bool:
        ctx = self.ctx
        study = ctx.plan.study
        t0 = time.monotonic()
        try:
            for name, workload in ctx.plan.workloads.items():
                levels = self.cell.levels.get(name) or []
                if not levels:
                    continue
                # each bench of each repeat takes prompts no earlier one sent (labctl.study.prompt_budget)
                canary_start, ladder_start = bench_starts(workload, levels, self.repeat)
                canary_workload = with_overrides(workload, [levels[0]])
                canary = self.bench(canary_workload, f"{name} canary c={levels[0]}", True, canary_start)
                if not self.bench_ok(canary, name, [levels[0]]):
                    return False
                self.between_levels(f"{name} canary")
                ladder = self.bench(with_overrides(workload, levels), name, False, ladder_start)
                if not self.bench_ok(ladder, name, levels):
                    return False
                if study.slo and ladder and not any(meets_slo(lv) for lv in ladder.levels):
                    # its numbers stand (the cell is done); the class says no level met the SLO
                    self.fail("SLO out of reach", f"no level of {name} met {study.slo}")
                self.between_levels(name)
            for name, suite in ctx.plan.suites.items():
                self.save(level=f"eval {name}")
                request = BenchRequest(workload=None, run_id=record.run_id, host=self.bench_host)
                if isinstance(suite, TaskSuite):
                    named = f"{suite.name}@{suite.version}"
                    result, path = run_lm_eval(ctx.runs, ctx.lab, named, request, 8, 300.0)
                else:
                    result, path = run_eval(ctx.runs, suite, request, 8, 300.0, lambda _d, _t: None)
                result["study"] = self.tag
                save_result(path, result)
                self.data["evals"].append(
                    {"suite": name, "eval_id": result["eval_id"], "score": result["score"], "status": result["status"]}
                )
            return True
        finally:
            times = self.data["times"]
            times["measuring_s"] = round(time.monotonic() - t0 - self.gap_s, 3)
            times["waiting_s"] = round(float(times["waiting_s"]) + self.gap_s, 3)

    def between_levels(self, after: str) -> None:
        if self.ctx.prefetch is None:
            return
        spent = self.ctx.prefetch.between_levels(self.cell.cell.key, after)
        if spent:
            self.gap_s += spent
            self.save()

    def bench(self, workload: Any, label: str, canary: bool, prompt_start: int = 0) -> BenchResult | None:
        ctx = self.ctx
        assert self.run_id is not None
        study = ctx.plan.study
        self.save(level=label)

        def progress(phase: str, done: int, total: int, eta: float | None) -> None:
            where = f"{label} {phase}"
            if where != self.data["level"]:
                self.save(level=where, level_eta_s=eta)

        request = BenchRequest(
            workload=workload,
            run_id=self.run_id,
            host=self.bench_host,
            max_error_rate=float(study.spec["max_error_rate"]),
            telemetry=not canary,
            engines=lab_telemetry(ctx.lab),
            batch_caps=lab_batch_caps(ctx.lab),
            prompt_start=prompt_start,
        )
        started = now()
        try:
            with self.level():
                result, path = run_bench(ctx.runs, request, progress, lambda _line: None)
        except LabctlError as exc:
            found = [
                r for r in list_results(ctx.runs, self.run_id) if r.workload.name == workload.name and self.wrote(r)
            ]
            if not found or found[-1].bench_id in {b["bench_id"] for b in self.data["benches"]}:
                self.fail("error", str(exc))  # refused before it measured anything
                return None
            result, path = find_result(ctx.runs, found[-1].bench_id)
            result = result.changed(failure=result.failure or str(exc).splitlines()[0])
        if path.is_file():
            document = mark_kv_bound(
                result.to_json(), self.cell.kv_bound.get(workload.name), self.cell.kv_streams.get(workload.name)
            )
            save_result(path, {**document, "study": {**self.tag, "canary": canary}})
        self.data["benches"].append(
            {
                "workload": workload.name,
                "bench_id": result.bench_id,
                "canary": canary,
                "status": result.status,
                "started_at": started,
                "finished_at": now(),
            }
        )
        self.save()
        return result

    def wrote(self, result: BenchResult) -> bool:
        return written_by(result, self.tag, process_token())

    @contextmanager
    def level(self) -> Iterator[None]:
        """A bench on this host: it never starts beside a pull there; its wait for one is the GPU's wait."""
        if self.ctx.prefetch is None:
            yield
            return
        t0 = time.monotonic()
        with self.ctx.prefetch.level():
            self.gap_s += time.monotonic() - t0
            yield

    def bench_ok(self, result: BenchResult | None, name: str, levels: list[int]) -> bool:
        """A crash or an out-of-memory censors this level and every higher one; too many errors fail the cell."""
        if result is None:
            return False
        bad = next((lv for lv in result.levels if lv.partial or not lv.completed), None)
        if result.status == "complete" and bad is None:
            return True
        alive, oom = engine_state(self.run_id or "")
        at = bad.concurrency if bad else None
        if at is None:
            measured = {lv.concurrency for lv in result.levels}
            at = next((c for c in levels if c not in measured), levels[-1])
        censored = [c for c in levels if c >= at]
        if not alive or oom:
            self.data["censored"][name] = censored
            with _signals_held():  # its logs are saved beside the record as it goes
                self.data["caveats"].extend(self.take_down())
            kind = "out of memory" if oom else "crash"
            self.fail(kind, f"the engine {'ran out of memory' if oom else 'exited'} at c={at} on {name}")
            return False
        self.fail(
            "error rate",
            f"more than {self.ctx.plan.study.spec['max_error_rate']:.0%} of requests failed at c={at} on {name}",
        )
        return False


def mark_kv_bound(document: dict[str, Any], bound: list[int] | None, streams: int | None) -> dict[str, Any]:
    """The result with its KV-bound levels marked (how many streams the plan found the KV cache holds)."""
    if not bound or streams is None:
        return document
    levels = [
        {**level, "kv_bound": {"streams": streams}} if level.get("concurrency") in bound else level
        for level in document.get("levels") or []
    ]
    return {**document, "levels": levels}


def run_cell(ctx: CellContext, cell: CellPlan, repeat: int, port: int | None = None) -> dict[str, Any] | None:
    """The (cell, repeat), or None when a finished one with the same fingerprint is reused."""
    stored = ctx.state.load_cell(cell.cell.key, repeat)
    if should_skip(stored, cell.fingerprints[repeat - 1].digest, ctx.redo_failed):
        return None
    return CellRun(ctx, cell, repeat, port).run()
