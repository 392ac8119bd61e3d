"""The answer's side, in its own container: load the model's code, then answer each call over the
protocol's own file descriptors.

Everything here runs in the answer's process, so the answer can change any of it: it decides what it
replies, and that is all it decides. The verdict is the tester's, in another container."""

from __future__ import annotations

import os
import sys
from typing import Any

from .wire import Ended, Reader, Unsendable, WireError, decode, dump, encode, parse, write_all

SOLUTION = "/case/solution.py"


def _exit_code(exc: SystemExit) -> str:
    return repr(exc.code)[:40]


def main() -> None:
    # The protocol keeps the descriptors Docker gave as stdin/stdout; the answer's own stdin is empty
    # and its stdout and stderr both go to the container's stderr, which labctl drains and bounds.
    calls, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)

    def send(message: dict[str, Any]) -> None:
        write_all(replies, dump(message))

    send({"started": True})
    # An answer runs alone: a fork's copies would read calls and write replies of their own, and which
    # copy answers which call would depend on the machine's load. So the first fork ends the answer,
    # reported at once, and a copy that comes back here ends without a word.
    me, calling = os.getpid(), [0]

    def forked() -> None:
        send({"id": calling[0], "forked": True} if calling[0] else {"forked": True})
        os._exit(0)

    os.register_at_fork(after_in_parent=forked)
    scope: dict[str, Any] = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        with open(SOLUTION, encoding="utf-8") as file:
            source = file.read()
        exec(compile(source, "solution.py", "exec"), scope)
    except SystemExit as exc:
        _copy_ends(me)
        send({"exited": _exit_code(exc)})
        return
    except BaseException as exc:
        _copy_ends(me)
        send({"broken": f"{type(exc).__name__}: {str(exc)[:150]}"})
        return
    _copy_ends(me)
    names = sorted(n for n, v in scope.items() if callable(v) and n.isidentifier() and not n.startswith("__"))
    send({"ready": names[:1000]})
    reader = Reader(calls)
    while True:
        try:
            call = parse(reader.line())
            number, name = call["id"], call["call"]
            args = decode(call["args"])
            kwargs = dict(decode(call["kwargs"]))
        except (Ended, WireError, KeyError, TypeError, ValueError):
            return
        calling[0] = number if type(number) is int else 0
        reply = _answer(scope, number, name, args, kwargs)
        _copy_ends(me)
        send(reply)


def _copy_ends(me: int) -> None:
    """A fork of the answer that came back here ends: it never reads a call or writes a reply."""
    if os.getpid() != me:
        os._exit(0)


def _answer(scope: dict[str, Any], number: int, name: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        value = scope[name](*args, **kwargs)
    except SystemExit as exc:
        return {"id": number, "exited": _exit_code(exc)}
    except BaseException as exc:
        return {"id": number, "raised": [type(exc).__name__, str(exc)[:200]]}
    try:
        return {"id": number, "value": encode(value)}
    except Unsendable as exc:
        return {"id": number, "unsendable": str(exc)[:80]}
    except RecursionError:
        return {"id": number, "unsendable": "a value nested too deeply to encode"}


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)
