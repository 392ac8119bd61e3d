"""What crosses the pipe between the answer and the tests: one JSON object per line, at most
MAX_MESSAGE bytes, and values as data only.

JSON alone would blur what a test compares (a tuple would arrive as a list, a dict's int keys as
strings), so every JSON object on the wire is a tag: {"tuple": [...]}, {"set": [...]},
{"frozenset": [...]}, {"dict": [[key, value], ...]}, {"bytes": "hex"}, {"float": "nan"}. Lists, strings,
ints, finite floats, booleans and null are themselves. Anything else (an object, a generator, a
function) is not data and does not cross."""

from __future__ import annotations

import json
import math
import os
import select
import time
from typing import Any

MAX_MESSAGE = 1024 * 1024
MAX_DEPTH = 64
DATA_TYPES = "None, bool, int, float, str, bytes, list, tuple, dict, set, frozenset"


class Unsendable(Exception):
    """A value that is not data: its type's name."""


class WireError(Exception):
    """Bytes on the pipe that are not the protocol."""


def encode(value: Any, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise Unsendable(f"a value nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is list:
        return [encode(item, depth + 1) for item in value]
    if kind in (tuple, set, frozenset):
        return {kind.__name__: [encode(item, depth + 1) for item in value]}
    if kind is dict:
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    raise Unsendable(f"a value of type {kind.__name__}")


_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def decode(data: Any, depth: int = 0) -> Any:
    """Only builtin data comes out: nothing the sender wrote can run here."""
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested deeper than {MAX_DEPTH}")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(item, depth + 1) for item in data]
    if type(data) is not dict or len(data) != 1:
        raise WireError("an object that is not one tagged value")
    ((tag, inner),) = data.items()
    try:
        if tag == "float" and inner in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[inner]
        if tag == "bytes" and type(inner) is str:
            return bytes.fromhex(inner)
        if type(inner) is not list:
            raise WireError(f"a {tag!r} value that is not a list")
        items = [decode(item, depth + 1) for item in inner]
        if tag == "tuple":
            return tuple(items)
        if tag == "set":
            return set(items)
        if tag == "frozenset":
            return frozenset(items)
        if tag == "dict" and all(type(pair) is list and len(pair) == 2 for pair in items):
            return {key: value for key, value in items}
    except (TypeError, ValueError) as exc:  # an unhashable key, bad hex
        raise WireError(f"a {tag!r} value that cannot be built: {exc}") from None
    raise WireError(f"an unknown tag {str(tag)[:40]!r}")


def _no_constants(name: str) -> Any:
    raise WireError(f"{name} is not JSON")


def parse(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not JSON ({str(exc)[:80]})") from None
    if type(message) is not dict:
        raise WireError("not a JSON object")
    return message


def dump(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


class Ended(Exception):
    """The other side closed the pipe."""


class TimedOut(Exception):
    """Nothing complete arrived before the deadline."""


class Reader:
    """Lines from a file descriptor, each at most MAX_MESSAGE bytes, each waited for until a deadline."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def line(self, deadline: float | None = None) -> bytes:
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_MESSAGE:
                raise WireError(f"a message longer than {MAX_MESSAGE // 1024} KiB")
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    raise TimedOut()
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise Ended()
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        if len(line) > MAX_MESSAGE:
            raise WireError(f"a message longer than {MAX_MESSAGE // 1024} KiB")
        return line
