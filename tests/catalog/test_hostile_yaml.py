"""Hostile YAML from a colleague: bombs, cycles, deep nesting, odd keys and tags, huge files. Each is
refused with one BadInput line naming the file, quickly, whatever the file is for."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from labctl.catalog.sourcefile import load_yaml_mapping
from labctl.errors import BadInput

MAX_BYTES = 1024 * 1024  # what labctl promises for a profile, engine file, workload or suite


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (rather than hang the test run) when the code under test takes longer than `seconds`."""

    def expired(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def laughs(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


HOSTILE = {
    "billion-laughs": (laughs(), "alias"),
    "self-alias": ("a: &x [*x]\n", "alias"),
    "self-alias-map": ("a: &x {b: *x}\n", "alias"),
    "unused-anchor": ("a: &x 1\nb: 2\n", "anchor"),
    "merge-key": ("base: &b {x: 1}\nother:\n  <<: *b\n", "anchor"),
    "deep-lists": ("a: " + "[" * 200 + "]" * 200 + "\n", "nested"),
    "deep-maps": ("a: " + "{b: " * 100 + "1" + "}" * 100 + "\n", "nested"),
    "int-key": ("1: a\n", "key"),
    "null-key": ("null: a\n", "key"),
    "bool-key": ("true: a\n", "key"),
    "list-key": ("? [a]\n: b\n", "key"),
    "timestamp": ("a: 2024-01-01\n", "timestamp"),
    "binary": ("a: !!binary aGVsbG8=\n", "binary"),
    "set": ("a: !!set {x, y}\n", "set"),
    "huge-int": ("a: " + "9" * 5000 + "\n", "number"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_yaml_is_one_clear_refusal(tmp_path: Path, name: str) -> None:
    text, word = HOSTILE[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    with deadline(5), pytest.raises(BadInput) as caught:
        load_yaml_mapping(path, display=f"engines/x/profiles/{name}.yaml")
    message = str(caught.value)
    assert message.startswith(f"engines/x/profiles/{name}.yaml:"), message
    assert word in message, message
    assert "\n" not in message and len(message) < 400, message


def test_file_size_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("a: '" + "x" * MAX_BYTES + "'\n")
    with deadline(5), pytest.raises(BadInput, match=r"big\.yaml: .*1024 KiB"):
        load_yaml_mapping(path)


def test_a_larger_bound_can_be_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "export.yaml"
    path.write_text("a: '" + "x" * MAX_BYTES + "'\n")
    assert len(load_yaml_mapping(path, max_bytes=4 * MAX_BYTES).data["a"]) == MAX_BYTES


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_only_regular_files_are_read(tmp_path: Path, kind: str) -> None:
    import os

    path = tmp_path / "profile.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    with deadline(5), pytest.raises(BadInput, match="not a regular file"):
        load_yaml_mapping(path)


def test_plain_data_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("a: 1\nb: [x, 'y', 2.5, true, null]\nc: {d: '2024-01-01', e: !!str 1}\n")
    src = load_yaml_mapping(path)
    assert src.data == {"a": 1, "b": ["x", "y", 2.5, True, None], "c": {"d": "2024-01-01", "e": "1"}}
    assert src.lines[("c", "e")] == 3
