"""Running a workload against a target: warm-up, then each concurrency level, closed loop (a
semaphore, infinite rate) or open loop (gamma-distributed arrivals, or a trace's own timestamps), bounded by
its requests and, when the workload says so, by a duration, its load rising over a ramp; measuring the client
too."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import resource
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from labctl.bench.client import Connection, RequestResult, Target
from labctl.bench.metrics import level_metrics, percentile
from labctl.bench.prompts import Prompt, sessions
from labctl.bench.workloads import Workload
from labctl.errors import BadInput

Progress = Callable[[str, int, int], None]  # (phase, done, total)
SATURATED_CPU = 0.85  # share of one core above which the client's own timing is suspect
KEPT_UP = 0.95  # an open loop kept up when it sent at >= this share of its own schedule's rate
RAMP_FLOOR = 0.05  # an open-loop ramp starts at this share of the target rate (a rate of 0 never sends)
PROBE_S = 0.01  # the event loop's probe wakes this often while a level measures
LOOP_LATE_MS = 10.0  # a probe p99 later than this: the client's own timestamps are that late too
MAX_PROBES = 100_000  # the probe keeps its latest wake-ups (over 16 minutes of them)


def send_rate(times: list[float]) -> float | None:
    """Requests per second from the first send (or due time) to the last; None for fewer than two."""
    if len(times) < 2 or max(times) <= min(times):
        return None
    return (len(times) - 1) / (max(times) - min(times))


@dataclass
class LevelOutcome:
    concurrency: int
    results: list[RequestResult]
    duration_s: float
    client_cpu_s: float
    target_rate: float | None
    interrupted: bool = False
    warnings: list[str] = field(default_factory=list)
    started: float | None = None  # perf_counter when measuring began (telemetry windows)
    duration_limit_s: float | None = None  # the workload's duration_s: no request was sent after it
    unsent: int = 0  # prompts the duration left unsent
    loop_late_p99_ms: float | None = None  # how late the client's event loop woke (its probe), p99 and max
    loop_late_max_ms: float | None = None
    workers: int = 1  # client processes that shared the streams (labctl/bench/shards.py)
    busiest_cpu_share: float | None = None  # with workers: the busiest one's share of its core

    def summary(self, slo: dict[str, float] | None) -> dict[str, Any]:
        metrics = level_metrics(self.results, self.duration_s, slo)
        sent = [r for r in self.results if r.sent]
        achieved = send_rate([r.sent for r in sent])
        scheduled = send_rate([r.scheduled for r in sent]) if self.target_rate else None
        cpu_share = self.client_cpu_s / self.duration_s if self.duration_s > 0 else 0.0
        # Each process has one event loop on one core: saturation is the busiest process's, not the sum's.
        busiest = cpu_share if self.workers == 1 or self.busiest_cpu_share is None else self.busiest_cpu_share
        warnings = list(self.warnings)
        if busiest > SATURATED_CPU:
            who = "it" if self.workers == 1 else f"its busiest of {self.workers} worker processes"
            warnings.append(f"CLIENT SATURATED: {who} used {busiest:.0%} of a core; latencies include its own queueing")
        if self.loop_late_p99_ms is not None and self.loop_late_p99_ms > LOOP_LATE_MS:
            loop = (
                "its event loop" if self.workers == 1 else f"the latest of its {self.workers} worker processes' loops"
            )
            warnings.append(
                f"CLIENT LATE: {loop} woke {self.loop_late_p99_ms:.1f} ms late at p99 (max "
                f"{self.loop_late_max_ms or 0:.0f} ms) with {busiest:.0%} of a core: every time it took (TTFT, ITL) "
                "can be that late; give the client a core of its own"
                + (" (--client-workers N spreads it over N)" if self.workers == 1 else " per worker")
            )
        if scheduled and achieved is not None and achieved < KEPT_UP * scheduled:
            warnings.append(
                f"CLIENT FELL BEHIND: it sent {achieved:.2f} req/s where its schedule asked {scheduled:.2f} "
                f"(target {self.target_rate:g}): the sends lagged their due times"
            )
        if metrics["chunks_unlike_usage"]:
            warnings.append(
                f"{metrics['chunks_unlike_usage']} request(s) streamed a number of token chunks other than their "
                "usage count (flagged in the per-request file): ITL pools the gaps there were; TTFT, TPOT and E2E stand"
            )
        if metrics["usage_fallback"]:
            warnings.append("the server sent no usage: output tokens were counted from chunks (may be wrong)")
        if metrics["failed"]:
            warnings.append(f"{metrics['failed']} request(s) failed: see failures")
        if self.duration_limit_s and not self.unsent and not self.interrupted:
            warnings.append(
                f"the level sent all its {len(self.results)} requests before its duration of {self.duration_limit_s:g} "
                "s ended: it measured fewer seconds than asked; raise requests to fill the duration"
            )
        send_p99, send_max = lateness(
            [(r.dispatched - r.scheduled) * 1000 for r in sent if r.scheduled and r.dispatched]
        )
        return {
            "concurrency": self.concurrency,
            "requests": len(self.results),
            **metrics,
            "client_cpu_s": self.client_cpu_s,
            "client_cpu_share": cpu_share,  # of one core: above 100 % with several worker processes
            "client_workers": self.workers,
            "client_cpu_busiest_share": busiest,
            "target_rate": self.target_rate,
            "achieved_rate": achieved,  # first send to last send: the draining tail is not sending
            "scheduled_rate": scheduled,
            "interrupted": self.interrupted,
            "duration_limit_s": self.duration_limit_s,
            "unsent": self.unsent,
            # the sender's own lateness: due time to the moment it let the request go (a concurrency cap's wait
            # after that is queue time, above)
            "send_lag_p99_ms": send_p99,
            "send_lag_max_ms": send_max,
            # the client's event loop: how late a 10 ms probe woke while the level measured (its timestamps' error)
            "loop_late_p99_ms": self.loop_late_p99_ms,
            "loop_late_max_ms": self.loop_late_max_ms,
            "warnings": warnings,
        }


# Files the process holds besides its streams: the interpreter, the result files, telemetry, a margin.
OPEN_FILES_RESERVE = 64
# errno texts of failures that are the client's own (its limits), never the engine's
CLIENT_ERRORS = tuple(os.strerror(e) for e in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS))


def raise_open_file_limit(need: int) -> int:
    """Raise the soft open-files limit towards the hard one for `need` streams; the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = hard == resource.RLIM_INFINITY
    wanted = max(soft, need * 2 + 256) if unlimited else min(hard, max(soft, need * 2 + 256))
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        return wanted
    return soft


def streams_allowed(soft: int) -> int:
    in_use = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 16
    return max(0, soft - in_use - OPEN_FILES_RESERVE)


def check_open_files(concurrency: int) -> None:
    """Before anything is sent: the open-files limit, raised up to the hard limit, must allow every stream of
    the top level; else one line saying how many it allows and how to raise it."""
    soft = raise_open_file_limit(concurrency)
    allowed = streams_allowed(soft)
    if concurrency > allowed:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        raise BadInput(
            f"concurrency {concurrency} needs {concurrency} open connections, but the open-files limit (soft "
            f"{soft}, hard {hard}, raised as far as allowed) leaves room for {allowed} streams. Raise it (`ulimit -n "
            f"{concurrency * 2 + 256}` as root, or the nofile line in /etc/security/limits.conf) or lower "
            "--concurrency. Nothing was sent."
        )


def client_failures(results: list[RequestResult]) -> str | None:
    """The client's own failures (open files, memory), in one line, or None: they are never the engine's."""
    own = [r.error for r in results if r.error and any(text in r.error for text in CLIENT_ERRORS)]
    if not own:
        return None
    return f"the client itself failed {len(own)} of {len(results)} request(s): {own[0][:120]}"


def request_body(workload: Workload, target: Target, prompt: Prompt) -> dict[str, Any]:
    spec = workload.spec
    body: dict[str, Any] = {
        "model": target.model,
        "max_tokens": prompt.max_tokens,
        "temperature": spec["temperature"],
        "stream": spec["stream"],
        "seed": spec["seed"],
    }
    if spec["ignore_eos"]:
        body["ignore_eos"] = True
    if spec["stream"]:
        body["stream_options"] = {"include_usage": True}
    if spec["endpoint"] == "chat":
        body["messages"] = list(prompt.messages) or [{"role": "user", "content": prompt.text}]
        body.update(target.chat_extras())
        if spec.get("tools"):
            body["tools"] = spec["tools"]
            if spec.get("tool_choice"):
                body["tool_choice"] = spec["tool_choice"]
    else:
        body["prompt"] = prompt.text
    return body


async def _closed_loop(
    target: Target,
    workload: Workload,
    prompts: list[Prompt],
    concurrency: int,
    connections: list[Connection],
    timeout: float | None,
    tick: Callable[[], None],
    results: list[RequestResult],
    deadline: float | None = None,
    ramp_s: float = 0.0,
) -> None:
    """Each stream sends its next prompt when its last answer is done, until the prompts (or the deadline) run
    out; with a ramp, stream i starts i/concurrency of the way through it."""
    chat = workload.endpoint == "chat"
    queue = list(reversed(sessions(prompts)))

    async def worker(connection: Connection, index: int) -> None:
        if ramp_s and index:
            await asyncio.sleep(ramp_s * index / concurrency)
        while queue:
            if deadline is not None and time.perf_counter() >= deadline:
                return
            for prompt in queue.pop():  # a multi-turn session's turns in order, after the user's pause
                if prompt.think_s:
                    await asyncio.sleep(prompt.think_s)
                result = RequestResult(input_len=prompt.input_len)
                await connection.send(request_body(workload, target, prompt), chat, result, timeout)
                results.append(result)
                tick()

    await asyncio.gather(*(worker(c, i) for i, c in enumerate(connections[:concurrency])))


def arrival_offsets(rate: float, shape: float, rng: random.Random, ramp_s: float = 0.0) -> Iterator[float]:
    """Seconds from the level's start at which requests are due: gamma gaps at `rate` (shape 1 = Poisson); over a
    ramp, each gap is drawn at the rate of its moment, rising linearly from RAMP_FLOOR of the target."""
    offset = 0.0
    while True:
        yield offset
        current = rate if not ramp_s or offset >= ramp_s else rate * max(RAMP_FLOOR, offset / ramp_s)
        offset += rng.gammavariate(shape, 1.0 / (current * shape))


async def _open_loop(
    target: Target,
    workload: Workload,
    prompts: list[Prompt],
    concurrency: int,
    connections: list[Connection],
    timeout: float | None,
    tick: Callable[[], None],
    offsets: Iterator[float],
    results: list[RequestResult],
    deadline: float | None = None,
    start: float | None = None,
) -> int:
    """Each prompt goes at its due time (the level's start + its offset), at most `concurrency` in flight; none
    is sent at or after the deadline. Returns how many prompts the deadline left unsent."""
    chat = workload.endpoint == "chat"
    idle = list(connections[:concurrency])
    free = asyncio.Semaphore(concurrency)
    tasks: list[asyncio.Task[None]] = []

    async def one(prompt: Prompt, due: float) -> None:
        result = RequestResult(input_len=prompt.input_len, scheduled=due, dispatched=time.perf_counter())
        async with free:
            connection = idle.pop()
            try:
                await connection.send(request_body(workload, target, prompt), chat, result, timeout)
            finally:
                idle.append(connection)
        results.append(result)
        tick()

    start = time.perf_counter() if start is None else start
    for sent, (prompt, offset) in enumerate(zip(prompts, offsets, strict=False)):
        due = start + offset
        if deadline is not None and due >= deadline:
            await asyncio.gather(*tasks)
            return len(prompts) - sent
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(prompt, due)))
    await asyncio.gather(*tasks)
    return 0


@dataclass
class LevelProgress:
    """What a level has measured so far: kept outside the event loop so Ctrl-C cannot lose it."""

    results: list[RequestResult] = field(default_factory=list)
    started: float | None = None
    cpu_started: float = 0.0
    loop_late_ms: list[float] = field(default_factory=list)  # the probe's wake-ups, how late each was


async def probe_loop(late_ms: list[float]) -> None:
    """Wakes every PROBE_S and notes how late: a client whose loop wakes late takes every timestamp late."""
    while True:
        due = time.perf_counter() + PROBE_S
        await asyncio.sleep(PROBE_S)
        late_ms.append(max(0.0, (time.perf_counter() - due) * 1000))
        if len(late_ms) > MAX_PROBES:
            del late_ms[: MAX_PROBES // 2]


def lateness(late_ms: list[float]) -> tuple[float | None, float | None]:
    """The p99 and max of lateness figures in ms (the probe's wake-ups, the sender's dispatches); none without any."""
    if not late_ms:
        return None, None
    return percentile(late_ms, 99), max(late_ms)


@dataclass(frozen=True)
class LevelPrompts:
    warm: list[Prompt]
    measured: list[Prompt]


async def run_level(
    target: Target,
    workload: Workload,
    concurrency: int,
    level_index: int,
    timeout: float | None,
    progress: Progress,
    partial: LevelProgress,
    prompts: LevelPrompts,
    until_measure: Callable[[], Awaitable[float]] | None = None,
) -> LevelOutcome:
    """Warm-up, then the measured prompts. `until_measure`, awaited after the warm-up, gives the moment (this
    machine's monotonic clock) measuring starts: a worker process of a sharded level starts with the others."""
    spec = workload.spec
    raise_open_file_limit(concurrency)
    connections = [Connection(target) for _ in range(concurrency)]
    made = prompts
    warm, measured = made.warm, made.measured
    counter = {"n": 0}
    probe: asyncio.Task[None] | None = None

    def ticker(phase: str, total: int) -> Callable[[], None]:
        counter["n"] = 0

        def tick() -> None:
            counter["n"] += 1
            progress(phase, counter["n"], total)

        return tick

    try:
        if warm:
            await _closed_loop(
                target,
                workload,
                warm,
                concurrency,
                connections,
                timeout,
                ticker(f"warm-up c={concurrency}", len(warm)),
                [],
            )
        start_at = None
        if until_measure is not None:
            start_at = await until_measure()
            await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
        partial.cpu_started = time.process_time()
        partial.started = time.perf_counter() if start_at is None else start_at  # one schedule for every worker
        probe = asyncio.create_task(probe_loop(partial.loop_late_ms))
        tick = ticker(f"measure c={concurrency}", len(measured))
        limit = spec.get("duration_s")
        deadline = partial.started + limit if limit else None
        ramp = float(spec.get("ramp_up_s") or 0.0)
        unsent = 0
        if measured and measured[0].at_s is not None:  # a trace: its own arrival times
            offsets = iter([p.at_s or 0.0 for p in measured])
            unsent = await _open_loop(
                target, workload, measured, concurrency, connections, timeout, tick, offsets, partial.results, deadline,
                partial.started,
            )  # fmt: skip
        elif spec["request_rate"]:
            rng = random.Random(f"{spec['seed']}:arrivals:{level_index}")
            offsets = arrival_offsets(spec["request_rate"], workload.burstiness, rng, ramp)
            unsent = await _open_loop(
                target, workload, measured, concurrency, connections, timeout, tick, offsets, partial.results, deadline,
                partial.started,
            )  # fmt: skip
        else:
            results = partial.results
            await _closed_loop(
                target, workload, measured, concurrency, connections, timeout, tick, results, deadline, ramp
            )
            unsent = len(measured) - len(results) if deadline is not None else 0
        outcome = outcome_of(concurrency, partial, spec["request_rate"])
        outcome.duration_limit_s, outcome.unsent = limit, unsent
        return outcome
    finally:
        if probe is not None:
            probe.cancel()
        for connection in connections:
            connection.close()


def outcome_of(concurrency: int, partial: LevelProgress, rate: float | None, interrupted: bool = False) -> LevelOutcome:
    duration = time.perf_counter() - partial.started if partial.started else 0.0
    cpu = time.process_time() - partial.cpu_started if partial.started else 0.0
    outcome = LevelOutcome(concurrency, list(partial.results), duration, cpu, rate, interrupted=interrupted)
    outcome.started = partial.started
    outcome.loop_late_p99_ms, outcome.loop_late_max_ms = lateness(partial.loop_late_ms)
    return outcome
