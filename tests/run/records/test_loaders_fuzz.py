"""Every loader of a file labctl reads back, fuzzed: arbitrary JSON/YAML values, and good files with one
part replaced by an arbitrary value or removed, give either a value or labctl's one-line refusal
(LabctlError), never another exception."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.hostile_json import VALUES, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labctl.bench.results import load_result
from labctl.catalog.hosts_file import _read_entries
from labctl.catalog.user_folders import default_lab
from labctl.errors import LabctlError
from labctl.quality.evals import load_eval
from labctl.run.records.export import build_export, load_export
from labctl.run.records.record import Endpoint, Record
from labctl.run.records.store import load_record_file

pytestmark = pytest.mark.process  # fuzzing with many examples: not the seconds-long unit tier

RUN = "20261203-015815-a1b2c3"


def record_sample() -> dict[str, Any]:
    endpoint = Endpoint(base_url="http://127.0.0.1:46001/v1", host="127.0.0.1", port=46001)
    record = Record(
        run_id=RUN, status="running", engine="harness", profile="smoke", served_model_name="m", endpoint=endpoint
    )
    return record.to_json()


def bench_sample() -> dict[str, Any]:
    level = {
        "concurrency": 1,
        "requests": 4,
        "completed": 4,
        "median_ttft_ms": 20.0,
        "p99_ttft_ms": 21.0,
        "median_tpot_ms": 2.0,
        "median_itl_ms": 2.0,
        "p99_itl_ms": 2.5,
        "median_e2el_ms": 200.0,
        "output_throughput": 400.0,
        "request_throughput": 3.0,
        "goodput": None,
        "client_cpu_share": 0.02,
        "median_ttft_ms_ci95": [19.0, 21.0],
        "warnings": [],
        "telemetry": {"gpu": {"gpus": {"0": {"name": "x", "utilization_gpu_pct": {"mean": 1, "max": 2}}}}},
    }
    return {
        "schema_version": 1,
        "bench_id": "b" + RUN,
        "run_id": RUN,
        "status": "complete",
        "created_at": "2026-12-03T01:58:15.000Z",
        "target": {"engine": "harness", "profile": "smoke", "model": "m", "environment_label": "harness-check"},
        "workload": {"name": "chat-sweep", "sha256": "ab" * 32, "overrides": []},
        "levels": [level],
        "warnings": [],
        "max_rate_meeting_slo": {"note": "n", "rule": "r", "slo": {"ttft_ms": 100}},
    }


def eval_sample() -> dict[str, Any]:
    return {
        "schema_version": 1,
        "eval_id": "e" + RUN,
        "run_id": RUN,
        "created_at": "2026-12-03T01:58:15.000Z",
        "suite": {"name": "short-answer", "version": "1.0", "sha256": "ab", "full_version": "1.0+ab"},
        "status": "complete",
        "score": 0.5,
        "passed": 1,
        "total": 2,
        "score_ci95": [0.0, 1.0],
        "cases": [{"id": "a", "passed": True, "reason": "ok"}, {"id": "b", "passed": False, "reason": "no"}],
    }


def export_sample() -> dict[str, Any]:
    data = record_sample()
    data["resolved_profile"] = {"port": 46001, "host": "127.0.0.1"}
    return build_export(Record.from_json(data), "services: {}\n")


def hosts_sample() -> dict[str, Any]:
    return {"hosts": {"h100-a": {"docker": "ssh://lab@10.0.0.5", "nvidia_smi": ["nvidia-smi"]}}, "default": "h100-a"}


def as_json(value: Any) -> str:
    return json.dumps(value)


class _Plain(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # labctl refuses anchors: write a shared value out twice, as a person would


def as_yaml(value: Any) -> str:
    return yaml.dump(value, Dumper=_Plain, allow_unicode=False)


# kind: (loader, a good file's data, how it is written)
LOADERS: dict[str, tuple[Callable[[Path], Any], Callable[[], Any], Callable[[Any], str]]] = {
    "record": (load_record_file, record_sample, as_json),
    "bench result": (load_result, bench_sample, as_json),
    "evaluation": (load_eval, eval_sample, as_json),
    "export": (load_export, export_sample, as_yaml),
    "hosts file": (_read_entries, hosts_sample, as_yaml),
    "user config": (default_lab, lambda: {"lab": "/srv/lab"}, as_yaml),
}


def load_or_refuse(kind: str, text: str) -> None:
    loader = LOADERS[kind][0]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("file.json" if LOADERS[kind][2] is as_json else "file.yaml")
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            loader(path)
        except LabctlError as exc:
            assert "\n" not in str(exc).strip() or kind == "export", str(exc)  # one line
            assert "Traceback" not in str(exc)


@pytest.mark.parametrize("kind", list(LOADERS))
def test_a_good_file_loads(kind: str) -> None:
    loader, sample, write = LOADERS[kind]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "file"
        path.write_text(write(sample()))
        assert loader(path) is not None


@pytest.mark.parametrize("kind", list(LOADERS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_value_gives_a_value_or_one_line(kind: str, data: st.DataObject) -> None:
    write = LOADERS[kind][2]
    value = data.draw(VALUES)
    load_or_refuse(kind, write(value))


@pytest.mark.parametrize("kind", list(LOADERS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_good_file_with_one_part_changed_gives_a_value_or_one_line(kind: str, data: st.DataObject) -> None:
    _, sample, write = LOADERS[kind]
    load_or_refuse(kind, write(data.draw(mutated(sample()))))


@pytest.mark.parametrize("kind", list(LOADERS))
def test_deep_nesting_and_huge_numbers_are_refused_in_one_line(kind: str) -> None:
    write = LOADERS[kind][2]
    deep = '{"a": [' * 300 + "1" + "]}" * 300  # JSON is YAML too
    for text in (deep, "[" * 200_000, '{"schema_version": ' + "9" * 5000 + "}", write({"x": float("nan")})):
        load_or_refuse(kind, text)
