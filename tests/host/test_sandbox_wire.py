"""What crosses the pipe between a code answer and its tests: data that keeps its Python type, and
nothing else; a malformed line is refused, never run."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from typing import Any

import pytest

from labctl.host.sandbox.sandboxed.wire import (
    MAX_MESSAGE,
    Ended,
    Reader,
    TimedOut,
    Unsendable,
    WireError,
    decode,
    dump,
    encode,
    parse,
    write_all,
)
from labctl.quality.suites import CHECK_VERSIONS, suite_digest


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**70),
        1.5,
        "é\n",
        b"\x00\xff",
        [1, [2]],
        (1, (2,)),
        {1, "a"},
        frozenset({(1, 2)}),
        {1: "a", (1, 2): [None], "k": {"nested": set()}},
        [],
        (),
        {},
    ],
)
def test_data_crosses_with_its_type(value: Any) -> None:
    back = decode(parse(dump({"value": encode(value)}))["value"])
    assert back == value and type(back) is type(value)


def test_special_floats_cross_and_true_is_not_one() -> None:
    assert math.isnan(decode(encode(math.nan)))
    assert decode(encode([math.inf, -math.inf])) == [math.inf, -math.inf]
    assert decode(encode(True)) is True and decode(encode(1)) is not True


class Int(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize("value", [object(), Int(3), (x for x in ()), len, [[[[]]]] * 0 + [Int(1)], {"a": object()}])
def test_anything_but_data_does_not_cross(value: Any) -> None:
    with pytest.raises(Unsendable):
        encode(value)


@pytest.mark.parametrize(
    "line",
    [b"garbage", b"[1]", b'{"value": NaN}', b"[" * 100_000, b'{"a": 1, "b": 2}'],
)
def test_a_line_that_is_not_the_protocol_is_refused(line: bytes) -> None:
    with pytest.raises(WireError):
        message = parse(line)
        decode(message)


@pytest.mark.parametrize(
    "tagged",
    [{"set": [[1]]}, {"dict": [[[1], 2]]}, {"dict": [1]}, {"bytes": "zz"}, {"eval": "1"}, {"float": "1e400"}],
)
def test_a_tagged_value_that_cannot_be_built_is_refused(tagged: Any) -> None:
    with pytest.raises(WireError):
        decode(tagged)


def write_until_closed(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):
        write_all(fd, data)


def test_the_reader_bounds_lines_and_waits_until_a_deadline() -> None:
    read, write = os.pipe()
    reader = Reader(read)
    write_all(write, b'{"a": 1}\n{"b"')
    assert reader.line(time.monotonic() + 1) == b'{"a": 1}'
    started = time.monotonic()
    with pytest.raises(TimedOut):
        reader.line(time.monotonic() + 0.2)
    assert time.monotonic() - started < 2
    os.close(write)
    with pytest.raises(Ended):
        reader.line(time.monotonic() + 1)
    os.close(read)
    big_r, big_w = os.pipe()
    writer = threading.Thread(target=write_until_closed, args=(big_w, b"x" * (MAX_MESSAGE + 70_000)))
    writer.start()
    with pytest.raises(WireError):
        Reader(big_r).line(time.monotonic() + 5)
    os.close(big_r)
    writer.join(5)
    os.close(big_w)


def test_a_changed_check_changes_the_suites_that_use_it_only() -> None:
    data = {"version": "1", "cases": []}
    assert CHECK_VERSIONS["python"] >= 2 and CHECK_VERSIONS["json_schema"] >= 2
    assert suite_digest(data, {"exact", "number"}) == suite_digest(data, set())
    assert suite_digest(data, {"python"}) != suite_digest(data, set())
    assert suite_digest(data, {"json_schema"}) != suite_digest(data, {"python"})
