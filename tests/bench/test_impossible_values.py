"""A result whose numbers no measurement gives is refused when it is read, naming the field: negative or
infinite latencies, a median above its p99, an interval backwards, more requests done than were sent. Before,
such a file loaded, compared as fine and crashed `report`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from labctl.bench.results import load_result, parse_result
from labctl.errors import BadInput
from labctl.run.records.typed import ShapeError

LEVEL = {
    "concurrency": 2,
    "requests": 10,
    "completed": 9,
    "failed": 1,
    "median_ttft_ms": 10.0,
    "p99_ttft_ms": 30.0,
    "median_ttft_ms_ci95": [8.0, 12.0],
    "median_tpot_ms": 2.0,
    "p99_tpot_ms": 4.0,
    "output_throughput": 100.0,
}


def result(**level: Any) -> dict[str, Any]:
    return {
        "bench_id": "b20261204-000000-aaaaaa",
        "run_id": "20261204-000000-aaaaaa",
        "levels": [{**LEVEL, **level}],
        "workload": {"name": "w", "sha256": "1" * 64},
        "target": {},
    }


def test_a_possible_result_loads() -> None:
    assert parse_result(result()).levels[0].figures["median_ttft_ms"] == 10.0
    # a Student-t interval over few runs may reach below zero: that is the statistic, not the measurement
    assert parse_result(result(median_ttft_ms_ci95=[-3.0, 23.0])).levels[0].intervals["median_ttft_ms"] == (-3.0, 23.0)


@pytest.mark.parametrize(
    ("change", "field", "said"),
    [
        ({"median_ttft_ms": -5.0}, "levels[0].median_ttft_ms", "not a possible measurement"),
        ({"p99_tpot_ms": float("inf")}, "levels[0].p99_tpot_ms", "not a finite number"),
        ({"output_throughput": float("nan")}, "levels[0].output_throughput", "not a finite number"),
        ({"median_ttft_ms": 50.0}, "levels[0].median_ttft_ms", "above the p99"),
        ({"median_ttft_ms_ci95": [12.0, 8.0]}, "levels[0].median_ttft_ms_ci95", "not an interval"),
        ({"completed": 12}, "levels[0].completed", "more than were sent"),
        ({"failed": -1}, "levels[0].failed", "a count is >= 0"),
        ({"concurrency": 0}, "levels[0].concurrency", "at least one stream"),
    ],
)
def test_an_impossible_value_is_refused_naming_its_field(change: dict[str, Any], field: str, said: str) -> None:
    with pytest.raises(ShapeError) as refused:
        parse_result(result(**change))
    assert refused.value.field == field and said in refused.value.problem, refused.value


def test_the_loader_says_it_in_one_line_with_the_file(tmp_path: Path) -> None:
    import json

    path = tmp_path / "b20261204-000000-aaaaaa.json"
    path.write_text(json.dumps(result(median_ttft_ms=-5.0)))
    with pytest.raises(BadInput) as refused:
        load_result(path)
    said = str(refused.value)
    assert str(path) in said and "levels[0].median_ttft_ms" in said and "\n" not in said, said
