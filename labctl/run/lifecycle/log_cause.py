"""The line of an engine's log that says why it stopped: a start failure's cause often stands tens of lines
above the end of the log (vLLM's "ValueError: … less than requested memory for kv" before its shutdown noise),
so quoting the last lines alone hides it."""

from __future__ import annotations

import re

# A Python exception (ValueError: …, torch.OutOfMemoryError: …), the way engines written in Python die, anywhere
# in a line (after a log prefix such as `ERROR 12-06 … [core.py:1]` or `harness: `).
EXCEPTION = re.compile(r"(?<![\w.])(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b: \S.{2,}")
# Other engines' error lines: a log level word, or Rust/C++ style `error:`; not Python's "Traceback" header.
ERROR = re.compile(r"(?:\bERROR\b|\[error\]|^\s*error(?:\[\w+\])?:|\bpanicked at\b|\bout of memory\b)", re.I)
# Lines that name an error without being one: shutdown chatter and the traceback's own header.
NOISE = re.compile(r"Traceback \(most recent call last\)|^\s*File \"|KeyboardInterrupt|asyncio.CancelledError")
MAX_CHARS = 300


def first_error_line(log: str) -> str | None:
    """The first exception of the log (from its name on, the log's prefix left out), else its first error
    line, trimmed; None when neither is there."""
    lines = [line.strip() for line in log.splitlines() if line.strip() and not NOISE.search(line)]
    for line in lines:
        found = EXCEPTION.search(line)
        if found:
            return line[found.start() :][:MAX_CHARS]
    return next((line[:MAX_CHARS] for line in lines if ERROR.search(line)), None)
