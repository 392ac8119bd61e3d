"""Numbers from a hostile colleague (a file or a flag): NaN, infinities, negatives and values so large
they exhaust the host are refused with one line that says the bound and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.bench.bench_request import BenchRequest
from labctl.bench.session import run_bench
from labctl.bench.workloads import Workload, check_workload, with_overrides
from labctl.catalog.fields import Field, check_mapping
from labctl.catalog.lab import Lab
from labctl.catalog.sourcefile import parse_yaml_mapping
from labctl.errors import BadInput
from labctl.quality.evaluate import run_eval
from labctl.quality.suites import load_suite
from labctl.run.lifecycle.reproduce import ReproduceRequest, reproduce
from labctl.run.records.store import Runs

WORKLOAD = """\
description: test
dataset: {kind: random, input_len: 16, output_len: 8}
requests: 4
concurrency: [1]
"""


def workload_problem(edit: tuple[str, str]) -> str:
    assert not edit[0] or edit[0] in WORKLOAD
    text = WORKLOAD.replace(*edit) if edit[0] else WORKLOAD + edit[1] + "\n"
    src = parse_yaml_mapping(text, Path("workloads/w.yaml"))
    with pytest.raises(BadInput) as caught:
        check_workload(src, src.data)
    return str(caught.value)


@pytest.mark.parametrize(
    "edit, words",
    [
        (("requests: 4", "requests: 1000000000"), ["requests", "100000"]),
        (("requests: 4", "requests: -1"), ["requests"]),
        (("requests: 4", "requests_per_concurrency: 1000000"), ["requests_per_concurrency", "100000"]),
        (("concurrency: [1]", "concurrency: [1, 100000]"), ["concurrency[1]", "4096"]),
        (("concurrency: [1]", "concurrency: [" + ", ".join(["1"] * 100) + "]"), ["concurrency", "64"]),
        (
            ("requests: 4\nconcurrency: [1]", "requests_per_concurrency: 1000\nconcurrency: [4096]"),
            ["requests", "100000"],
        ),
        (("input_len: 16", "input_len: 2000000"), ["input_len", "1048576"]),
        (("output_len: 8", "output_len: 99999999999"), ["output_len", "1048576"]),
        (("", "temperature: .nan"), ["temperature", "finite"]),
        (("", "request_rate: .inf"), ["request_rate", "finite"]),
        (("", "request_rate: 0.0000001"), ["request_rate"]),
        (("", "burstiness: .nan"), ["burstiness", "finite"]),
        (("", "burstiness: 1.0e-300"), ["burstiness"]),
        (("", "max_tokens: 99999999"), ["max_tokens", "1048576"]),
        (("", "warmup_per_concurrency: 1000000"), ["warmup_per_concurrency"]),
        (("", "seed: 99999999999999999999999"), ["seed", "2**53"]),
        (("", "slo: {ttft_ms: .inf}"), ["slo.ttft_ms", "finite"]),
        (("", "slo: {e2e_ms: 1.0e+300}"), ["slo.e2e_ms"]),
    ],
)
def test_workload_numbers_are_bounded(edit: tuple[str, str], words: list[str]) -> None:
    message = workload_problem(edit)
    assert message.startswith("workloads/w.yaml:"), message
    for word in words:
        assert word in message, message


def test_prompt_text_built_per_level_is_bounded() -> None:
    """Each bound alone is fine; 100000 requests of 1M-word prompts would be 10**11 words in memory."""
    text = WORKLOAD.replace("input_len: 16", "input_len: 1048576").replace("requests: 4", "requests: 100000")
    src = parse_yaml_mapping(text, Path("workloads/w.yaml"))
    with pytest.raises(BadInput, match="prompt words"):
        check_workload(src, src.data)
    with pytest.raises(BadInput, match="prompt words"):
        with_overrides(_workload(), requests=100_000, input_len=1_048_576)


def _workload() -> Workload:
    src = parse_yaml_mapping(WORKLOAD, Path("workloads/w.yaml"))
    return Workload("w", check_workload(src, src.data), Path("."))


@pytest.mark.parametrize(
    "kwargs, option",
    [
        ({"requests": 1_000_000_000}, "--requests"),
        ({"concurrency": [100_000]}, "--concurrency"),
        ({"input_len": 10_000_000}, "--input-len"),
        ({"output_len": 10_000_000}, "--output-len"),
    ],
)
def test_bench_overrides_are_bounded(kwargs: dict[str, object], option: str) -> None:
    with pytest.raises(BadInput, match=option):
        with_overrides(_workload(), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 0.0, 1e9])
def test_bench_request_timeout_is_checked_before_anything(tmp_path: Path, value: float) -> None:
    request = BenchRequest(workload=_workload(), base_url="http://127.0.0.1:9/v1", model="m", request_timeout=value)
    with pytest.raises(BadInput, match="--request-timeout"):
        run_bench(Runs(tmp_path), request, lambda *_: None, lambda _: None)
    assert not (tmp_path / "runs").exists()


SUITE = """\
version: '1'
description: test
cases:
- id: a
  prompt: what?
  check: {kind: number, expected: 1, tolerance: 0.5}
  reference: '1'
"""


def suite_problem(tmp_path: Path, old: str, new: str) -> str:
    folder = tmp_path / "suites" / "s"
    folder.mkdir(parents=True, exist_ok=True)
    assert old in SUITE
    (folder / "suite.yaml").write_text(SUITE.replace(old, new))
    with pytest.raises(BadInput) as caught:
        load_suite(Lab(tmp_path), "s")
    return str(caught.value)


@pytest.mark.parametrize(
    "old, new, words",
    [
        ("expected: 1", "expected: .nan", ["expected", "finite"]),
        ("expected: 1", "expected: .inf", ["expected", "finite"]),
        ("tolerance: 0.5", "tolerance: .nan", ["tolerance", "finite"]),
        ("tolerance: 0.5", "tolerance: .inf", ["tolerance", "finite"]),
        ("tolerance: 0.5", "timeout_s: .inf", ["timeout_s", "finite"]),
        ("tolerance: 0.5", "timeout_s: 100000", ["timeout_s", "600"]),
        ("prompt: what?", "prompt: what?\n  max_tokens: 99999999", ["max_tokens", "1048576"]),
        ("prompt: what?", "prompt: what?\n  temperature: .nan", ["temperature", "finite"]),
    ],
)
def test_suite_numbers_are_bounded(tmp_path: Path, old: str, new: str, words: list[str]) -> None:
    message = suite_problem(tmp_path, old, new)
    assert message.startswith("suites/s/suite.yaml:") or message.startswith(str(tmp_path)), message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(
    "timeout, concurrency, option",
    [
        (float("nan"), 8, "--timeout"),
        (-1.0, 8, "--timeout"),
        (float("inf"), 8, "--timeout"),
        (30.0, 100_000, "--concurrency"),
    ],
)
def test_eval_options_are_checked_before_anything(
    tmp_path: Path, timeout: float, concurrency: int, option: str
) -> None:
    folder = tmp_path / "suites" / "s"
    folder.mkdir(parents=True)
    (folder / "suite.yaml").write_text(SUITE)
    suite = load_suite(Lab(tmp_path), "s")
    request = BenchRequest(workload=None, base_url="http://127.0.0.1:9/v1", model="m")
    with pytest.raises(BadInput, match=option):
        run_eval(Runs(tmp_path), suite, request, concurrency, timeout, lambda *_: None)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 1e9])
def test_reproduce_timeout_is_checked_before_anything(tmp_path: Path, value: float) -> None:
    with pytest.raises(BadInput, match="--timeout"):
        reproduce(Lab(tmp_path), Runs(tmp_path), ReproduceRequest(source="missing.yaml", timeout=value), print)


@pytest.mark.parametrize("text", [".nan", ".inf", "-.inf", "1.0e+400"])
def test_every_float_field_is_finite(text: str) -> None:
    src = parse_yaml_mapping(f"x: {text}\n", Path("f.yaml"))
    with pytest.raises(BadInput, match=r"f\.yaml:1: x: .*finite"):
        check_mapping(src, (), src.data, {"x": Field("float", "a number")})


def test_every_int_field_has_an_upper_bound() -> None:
    src = parse_yaml_mapping("x: 9007199254740993\n", Path("f.yaml"))
    with pytest.raises(BadInput, match=r"2\*\*53"):
        check_mapping(src, (), src.data, {"x": Field("int", "a whole number")})
