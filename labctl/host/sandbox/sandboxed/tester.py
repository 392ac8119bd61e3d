"""The tests' side, in its own container: run the suite's test lines with a proxy for each of the
answer's functions, each call sent over the pipe, and decide the verdict. No answer code runs here:
what comes back is decoded into builtin data, never run.

Usage: tester.py TIMEOUT_S STARTUP_S. Reads calls' replies on stdin, writes calls on stdout, and
writes one verdict line, {"passed", "reason", "ended"}, on stderr (its only other output)."""

from __future__ import annotations

import builtins
import os
import sys
import time
from typing import Any

from .wire import DATA_TYPES, Ended, Reader, TimedOut, Unsendable, WireError, decode, dump, encode, parse, write_all

TESTS = "/case/tests.py"


class Failed(BaseException):
    """The answer failed in a way no test line can catch: the reason, and where the answer ended."""

    def __init__(self, reason: str, ended: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.ended = reason, ended


def _raised(name: str, message: str) -> Exception:
    """The answer's exception as the same builtin type (a test may expect it), else one named like it."""
    known = getattr(builtins, name, None) if name.isidentifier() else None
    if isinstance(known, type) and issubclass(known, Exception):
        return known(message)
    safe = name if name.isidentifier() else "Exception"
    named: type[Exception] = type(safe, (Exception,), {})
    return named(message)


class Pipe:
    def __init__(self, replies: int, calls: int, timeout_s: float) -> None:
        self.reader, self.calls, self.timeout_s = Reader(replies), calls, timeout_s
        self.deadline = 0.0
        self.count = 0

    def receive(self, deadline: float, where: str, late: str) -> dict[str, Any]:
        try:
            return parse(self.reader.line(deadline))
        except TimedOut:
            raise Failed(late) from None
        except Ended:
            raise Failed(f"the answer ended {where}", ended=where) from None
        except WireError as exc:
            raise Failed(f"the pipe carried something that is not the protocol {where}: {exc}") from None

    def start(self, startup_s: float) -> list[str]:
        where = "before the tests ran"
        first = self.receive(
            time.monotonic() + startup_s, where, f"the answer's sandbox did not start within {startup_s:g} s"
        )
        if first != {"started": True}:
            raise Failed(f"the pipe carried something that is not the protocol {where}")
        self.deadline = time.monotonic() + self.timeout_s
        hello = self.receive(self.deadline, where, f"the answer was still loading after {self.timeout_s:g} s")
        if "exited" in hello:
            raise Failed(f"the answer exited ({hello['exited']}) while loading, {where}")
        if "forked" in hello:
            raise Failed(f"the answer forked while loading, {where}: an answer runs alone")
        if "broken" in hello:
            raise Failed(f"the code does not run: {str(hello['broken'])[:180]}")
        names = hello.get("ready")
        if type(names) is not list or not all(type(n) is str and n.isidentifier() for n in names):
            raise Failed(f"the pipe carried something that is not the protocol {where}")
        return names

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.count += 1
        label = f"call {self.count} ({name})"
        try:
            message = {"id": self.count, "call": name, "args": encode(list(args)), "kwargs": encode(kwargs)}
        except Unsendable as exc:
            raise Failed(f"the test passes {exc} to {name}, which cannot cross the pipe ({DATA_TYPES})") from None
        try:
            write_all(self.calls, dump(message))
        except OSError:
            raise Failed(f"the answer ended before {label}", ended=f"before {label}") from None
        reply = self.receive(
            self.deadline,
            f"during {label}",
            f"the answer did not answer {label} within the case's {self.timeout_s:g} s",
        )
        if reply.get("id") != self.count:
            said = f"it names call {str(reply['id'])[:20]}" if "id" in reply else "it is not a reply to a call"
            raise Failed(f"the answer's reply to {label} is not the protocol: {said}")
        if "exited" in reply:
            raise Failed(f"the answer exited ({str(reply['exited'])[:40]}) during {label}")
        if "forked" in reply:
            raise Failed(f"the answer forked during {label}: an answer runs alone")
        if "unsendable" in reply:
            what = str(reply["unsendable"])[:80]
            raise Failed(f"{label} returned {what}, which is not data that can cross the pipe ({DATA_TYPES})")
        if "raised" in reply:
            raised = reply["raised"]
            if type(raised) is not list or len(raised) != 2 or not all(type(p) is str for p in raised):
                raise Failed(f"the answer's reply to {label} is not the protocol")
            raise _raised(raised[0][:60], raised[1][:200])
        if "value" not in reply:
            raise Failed(f"the answer's reply to {label} is not the protocol")
        try:
            return decode(reply["value"])
        except WireError as exc:
            raise Failed(f"the answer's reply to {label} is not the protocol: {exc}") from None


class Proxy:
    def __init__(self, pipe: Pipe, name: str) -> None:
        self.pipe, self.name = pipe, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.pipe.call(self.name, args, kwargs)

    def __repr__(self) -> str:
        return f"<the answer's {self.name}>"


def run_tests(pipe: Pipe, names: list[str], tests: str) -> tuple[bool, str]:
    # The tests' builtins stay the tester's own: an answer defining `len` must not answer for `len(...)`.
    scope: dict[str, Any] = {name: Proxy(pipe, name) for name in names if not hasattr(builtins, name)}
    for number, line in enumerate(tests.splitlines(), 1):
        if not line.strip():
            continue
        try:
            exec(compile(line, "tests.py", "exec"), scope)
        except AssertionError:
            return False, f"test line {number} failed: {line.strip()[:150]}"
        except NameError as exc:
            missing = getattr(exc, "name", None)
            if missing and missing not in names and not hasattr(builtins, missing):
                return False, f"the answer does not define {missing} (test line {number})"
            return False, f"test line {number} raised NameError: {str(exc)[:120]}"
        except Exception as exc:
            return False, f"test line {number} raised {type(exc).__name__}: {str(exc)[:120]}"
    if pipe.count == 0:
        return False, "the tests made no call to the answer"
    return True, "all tests passed"


def main() -> None:
    replies, calls, verdict = os.dup(0), os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    timeout_s, startup_s = float(sys.argv[1]), float(sys.argv[2])
    pipe = Pipe(replies, calls, timeout_s)
    ended = None
    try:
        with open(TESTS, encoding="utf-8") as file:
            tests = file.read()
        passed, reason = run_tests(pipe, pipe.start(startup_s), tests)
    except Failed as failure:
        passed, reason, ended = False, failure.reason, failure.ended
    except BaseException as exc:  # the tester's own failure is never a pass
        passed, reason = False, f"the test process failed: {type(exc).__name__}: {str(exc)[:150]}"
    os.close(calls)
    write_all(verdict, dump({"passed": passed, "reason": reason, "ended": ended, "calls": pipe.count}))


if __name__ == "__main__":
    main()
    os._exit(0)
