"""A suite's regex check, run where a catastrophic pattern cannot hang labctl.

The pattern is a colleague's and the text an engine's: `(a|a)*b` on forty `a`s backtracks for
hours, and Python's `re` cannot be stopped from another thread. So each match runs in a child
Python with a time limit (and a memory cap), and both the pattern and the text are bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

# Longer than any answer check a person reviews; long patterns are where backtracking hides.
MAX_PATTERN_CHARS = 1000
# A right answer to a suite case is a few lines; 64 Ki characters is far beyond, and bounds the work.
MAX_ANSWER_CHARS = 65_536
# A sane pattern matches 64 KiB in milliseconds; a second of CPU is backtracking. CPU time, not the clock's:
# on a loaded machine a sane match can wait longer than that for a core, and must still count as a match.
MATCH_SECONDS = 1.0

_CHILD = """
import json, re, resource, signal, sys
pattern, text, seconds = json.loads(sys.stdin.read())
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
signal.signal(signal.SIGVTALRM, lambda *_: sys.exit(3))
signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
sys.exit(0 if re.fullmatch(pattern, text, re.S) else 1)
"""


def timed_fullmatch(pattern: str, text: str, seconds: float | None = None) -> bool | None:
    """Whether the whole text matches; None when the match ran past the time limit (or its memory)."""
    seconds = MATCH_SECONDS if seconds is None else seconds
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _CHILD],
            input=json.dumps([pattern, text, seconds]),
            capture_output=True,
            text=True,
            timeout=seconds + 10,
        )
    except subprocess.TimeoutExpired:
        return None
    return proc.returncode == 0 if proc.returncode in (0, 1) else None


_CALL = """
import importlib, json, resource, signal, sys
module, function, args, seconds = json.loads(sys.stdin.read())
call = getattr(importlib.import_module(module), function)
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
signal.signal(signal.SIGVTALRM, lambda *_: sys.exit(3))
signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
sys.stdout.write(json.dumps(call(*args)))
"""


def timed_call(module: str, function: str, args: list[Any], seconds: float | None = None) -> Any:
    """`module.function(*args)` (JSON in, JSON out) in a child Python with a time limit, for library code
    whose regular expressions meet an engine's text (a JSON Schema's `pattern`); None past the limit."""
    seconds = MATCH_SECONDS if seconds is None else seconds
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", _CALL],
            input=json.dumps([module, function, args, seconds]),
            capture_output=True,
            text=True,
            timeout=seconds + 10,
        )
    except subprocess.TimeoutExpired:
        return None
    return json.loads(proc.stdout) if proc.returncode == 0 else None
