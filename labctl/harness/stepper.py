"""Token emission as an engine's decode steps: one timer for all streams instead of one sleeping task
per stream, so a burst of due tokens costs a heap pop and a socket write each."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import time
from collections import deque
from collections.abc import Callable

SLOW_READER_BYTES = 4 * 1024 * 1024
# epoll wakes on whole milliseconds, rounded up: wake this much early and poll I/O until the due time.
EARLY = 0.001  # a client this far behind is cut off rather than buffered forever


def frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%b\r\n" % (len(data), data) if data else b""


class StreamJob:
    """One streaming response's tokens, each due at an absolute time on the loop's clock."""

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        tokens: list[str],
        prefix: bytes,
        suffix: bytes,
        first_due: float,
        gap: Callable[[], float],
        lateness: deque[float],
        drop_at: int = -1,
    ) -> None:
        self.writer, self.tokens, self.prefix, self.suffix = writer, tokens, prefix, suffix
        self.first_due = self.due = first_due
        self.gap, self.lateness, self.drop_at = gap, lateness, drop_at
        self.index = 0
        self.thought, self.thinking = prefix, 0  # the first `thinking` tokens go out under `thought`
        self.last_suffix: bytes | None = None  # the last token's suffix when it differs (vLLM: the finish reason)
        self.request_id = ""
        self.first_log: deque[tuple[str, float]] | None = None  # (X-Request-Id, when its first token was written)
        self.finished: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def emit(self, now: float) -> float | None:
        """Write every token already due; return when the next one is due (None when finished)."""
        if self.writer.is_closing():
            return self._finish("gone")  # the client went away: free the slot
        if self.index == 0:
            self.lateness.append(now - self.first_due)
        parts: list[bytes] = []
        started = self.index
        tokens, prefix, suffix = self.tokens, self.prefix, self.suffix
        last_suffix = self.last_suffix or suffix
        final = len(tokens) - 1 if self.last_suffix is not None else -1
        while self.index < len(tokens) and self.due <= now:
            if self.index == self.drop_at:
                self.writer.write(frame(b"".join(parts)))
                self.writer.transport.abort()
                return self._finish("dropped")
            head = prefix if self.index >= self.thinking else self.thought
            end = suffix if self.index != final else last_suffix
            parts.append(b"data: " + head + json.dumps(tokens[self.index]).encode() + end + b"\n\n")
            self.index += 1
            if self.index < len(tokens):
                self.due += self.gap()
        self.writer.write(frame(b"".join(parts)))
        if started == 0 and parts and self.first_log is not None:
            self.first_log.append((self.request_id, time.perf_counter()))
        if self.writer.transport.get_write_buffer_size() > SLOW_READER_BYTES:
            self.writer.transport.abort()
            return self._finish("gone")
        if self.index == len(tokens):
            return self._finish("complete")
        return self.due

    def _finish(self, outcome: str) -> float | None:
        if not self.finished.done():
            self.finished.set_result(outcome)
        return None


class Stepper:
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.heap: list[tuple[float, int, StreamJob]] = []
        self.order = itertools.count()
        self.timer: asyncio.TimerHandle | None = None
        self.armed_for = float("inf")

    def add(self, job: StreamJob) -> None:
        heapq.heappush(self.heap, (job.due, next(self.order), job))
        self._arm()

    def _arm(self) -> None:
        if not self.heap:
            return
        earliest = self.heap[0][0]
        if self.timer is None or earliest < self.armed_for:
            if self.timer is not None:
                self.timer.cancel()
            self.armed_for = earliest
            self.timer = self.loop.call_at(earliest - EARLY, self._step)

    def _step(self) -> None:
        self.timer, self.armed_for = None, float("inf")
        now = self.loop.time()
        heap = self.heap
        if heap and heap[0][0] > now:
            # woken early on purpose: keep serving I/O (zero-timeout polls) until the step is due
            self.timer = self.loop.call_soon(self._step)  # type: ignore[assignment]
            self.armed_for = heap[0][0]
            return
        while heap and heap[0][0] <= now:
            _, _, job = heapq.heappop(heap)
            try:
                following = job.emit(now)
            except (ConnectionError, RuntimeError):
                following = job._finish("gone")
            if following is not None:
                heapq.heappush(heap, (following, next(self.order), job))
        self._arm()
