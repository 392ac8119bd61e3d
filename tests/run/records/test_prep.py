"""Prep parts in the record (read and written, old records still readable) and in compare's checklist:
a cold and a warm start are said to differ, without refusing the table."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from labctl.bench.results import parse_result
from labctl.compare.formats import checklist_lines
from labctl.compare.rules import CACHE_RULE, Entry, checklist
from labctl.run.models.fetch import Meter
from labctl.run.records.prep import PREP_PARTS, PrepPart
from labctl.run.records.prep_view import cache_state, prep_rows
from labctl.run.records.record import Record

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def record(run_id: str, **prep: PrepPart) -> Record:
    return Record(run_id=run_id, status="running", engine="vllm", profile="qwen3-32b", served_model_name="q", prep=prep)


def test_prep_parts_round_trip_through_the_record_json() -> None:
    parts = {
        "model_fetch": PrepPart(12.5, bytes=65_000_000_000, cached=False, detail=f"Qwen/Qwen3-32B@main -> {COMMIT}"),
        "engine_load": PrepPart(3.25, detail="container start -> port open"),
    }
    data = record("20261203-015815-a1b2c3", **parts).to_json()
    assert data["prep"]["model_fetch"] == parts["model_fetch"].to_json()
    assert Record.from_json(data).prep == parts


def test_a_record_written_before_prep_parts_reads_with_none() -> None:
    data = record("20261203-015815-a1b2c3").to_json()
    del data["prep"]
    assert Record.from_json(data).prep == {}


def test_a_malformed_prep_is_refused() -> None:
    data = record("20261203-015815-a1b2c3").to_json()
    data["prep"] = {"model_fetch": [1, 2]}
    with pytest.raises(ValueError):
        Record.from_json(data)


def test_show_lists_parts_in_their_order() -> None:
    prep = {"warmup": PrepPart(0.5), "model_fetch": PrepPart(2.0, bytes=2048, cached=True)}
    assert prep_rows(prep) == [
        ("prep model_fetch", "2 s, 2.0 KiB transferred, cached"),
        ("prep warmup", "0.5 s"),
    ]
    assert list(PREP_PARTS) == [
        "queue_wait",  # a Slurm job's wait in the queue, before anything else: never in cold start
        "image_pull",
        "model_fetch",
        "engine_build",
        "engine_load",
        "warmup",
        "first_completion",
    ]


def entry(given: str, rec: Record) -> Entry:
    result = {"target": {"environment_label": "harness-check"}, "workload": {"name": "w", "sha256": "0" * 64}}
    ids = {"bench_id": "b" + given, "run_id": rec.run_id}
    return Entry(given=given, result=parse_result({**ids, **result, "levels": []}), record=rec, evals={})


def test_compare_says_when_one_run_was_a_cold_start_and_the_other_warm() -> None:
    cold = record("20261203-015815-aaaaaa", model_fetch=PrepPart(30.0, bytes=10, cached=False))
    warm = record("20261203-015815-bbbbbb", model_fetch=PrepPart(0.4, bytes=0, cached=True))
    assert cache_state(cold.prep) == "pull -, fetch cold, build -"
    checks = checklist([entry("a", cold), entry("b", warm)])
    cache = next(c for c in checks if c.rule == CACHE_RULE)
    assert not cache.ok and not cache.blocking
    assert all(c.ok for c in checks if c.blocking), "a cache difference alone does not refuse the table"
    assert f"! {CACHE_RULE}: a: pull -, fetch cold, build -; b: pull -, fetch cached, build -" in checklist_lines(
        checks
    )
    same = checklist([entry("a", warm), entry("b", warm)])
    assert next(c for c in same if c.rule == CACHE_RULE).ok


def test_progress_lines_give_bytes_rate_and_eta() -> None:
    lines: list[str] = []
    meter = Meter(4 << 20, lines.append, None)
    meter.start -= 2.0  # two seconds into the fetch
    meter(4 << 20)
    assert lines and lines[-1].startswith("fetch: 4.0 MiB of 4.0 MiB (100%), ") and lines[-1].endswith("ETA 0 s")
    assert "MiB/s" in lines[-1]


def test_gc_keeps_the_snapshot_a_run_fetched_even_after_its_branch_moved(tmp_path: Path) -> None:
    from labctl.run.models.gc import uses_of
    from labctl.run.records.record import ComposeInfo, EngineSetup

    repo = tmp_path / "hub" / "models--Qwen--Qwen3-32B"
    old, new = "a" * 40, "b" * 40
    for commit in (old, new):
        (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(new)  # main moved on after the run fetched `old`
    rec = dataclasses.replace(
        record("20261203-015815-a1b2c3"),
        resolved_profile={"model": {"id": "Qwen/Qwen3-32B", "revision": "main"}},
        compose=ComposeInfo(render_options={"cache_dir": str(tmp_path), "engine_store": None}),
        engine_setup=EngineSetup(model_commit=old),
    )
    assert uses_of(rec).snapshot == repo / "snapshots" / old
    before_fetch_was_recorded = dataclasses.replace(rec, engine_setup=EngineSetup())
    assert uses_of(before_fetch_was_recorded).snapshot == repo / "snapshots" / new
