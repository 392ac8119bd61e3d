"""Long-context levels as the seed ran them, in process: a study keeps every level it asks for, the levels whose
KV cache cannot hold every stream are marked KV-bound (plan, result, report) with the engine's preemption and
queue counters beside them, and drop_kv_bound leaves them out only when the study says so. The effective
settings that differ between cells are a finding of the plan."""

from __future__ import annotations

from pathlib import Path

import yaml
from helpers.support import REPO

from labctl.bench.results import parse_result
from labctl.catalog.fit import Target, fit
from labctl.catalog.lab import Lab
from labctl.compare.pivot import all_caveats
from labctl.compare.rules import Entry, checklist
from labctl.compose.declared_settings import effective_settings
from labctl.run.records.record import Record
from labctl.study.cell_run import mark_kv_bound
from labctl.study.cells import expand_cells
from labctl.study.plan import plan_ladders, settings_findings, study_workloads
from labctl.study.report import kv_bound_lines
from labctl.study.spec import TARGET_GPUS, load_study

LAB = Lab(REPO)
H100 = REPO / "studies" / "h100-qwen3-32b.yaml"
PUBLISHED = [60, 120, 180, 240, 300, 360, 420, 480, 540, 600]  # the published sweep's levels at 16K


def h100_ladders(path: Path = H100) -> dict:
    study = load_study(path)
    cells = expand_cells(LAB, study, ["local"], None)
    workloads = study_workloads(LAB, study)
    out = {}
    for cell in cells:
        assert cell.entry.target_gpu == "H100"  # the study names its GPU: no host is asked
        target = Target("H100", *TARGET_GPUS["H100"])
        out[cell.key] = plan_ladders(workloads, fit(cell.profile, target), study.drop_kv_bound)
    return out


def test_the_h100_study_keeps_every_long_context_level_and_marks_the_kv_bound_ones() -> None:
    ladders = h100_ladders()
    assert len(ladders) == 3
    for key, ladder in ladders.items():
        assert ladder.levels["long-context"] == PUBLISHED, key  # every level the study asks for runs
        assert ladder.bound["long-context"] == PUBLISHED, key  # 60 x 16K tokens is beyond one H100 pair's KV
        assert 1 <= ladder.streams["long-context"] < 60 and ladder.dropped["long-context"] == []
        assert ladder.bound["sharegpt"] == [] or ladder.levels["sharegpt"][-1] == 1200


def test_drop_kv_bound_is_the_study_option_that_leaves_them_out(tmp_path: Path) -> None:
    data = yaml.safe_load(H100.read_text())
    data["drop_kv_bound"] = True
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    for ladder in h100_ladders(path).values():
        assert ladder.levels["long-context"] == [] and ladder.dropped["long-context"] == PUBLISHED


def test_the_plan_names_the_settings_that_differ_between_cells() -> None:
    study = load_study(H100)
    cells = expand_cells(LAB, study, ["local"], None)
    found = settings_findings({cell.key: effective_settings(cell.profile) for cell in cells})
    chunked = next(line for line in found if line.startswith("setting chunked prefill differs"))
    assert "trtllm.qwen3-32b+max_num_seqs=1200@local off (default)" in chunked
    assert not any(line.startswith(("setting prefix caching", "setting KV-cache dtype")) for line in found)


def test_the_spark_study_makes_its_same_rules_settings_equal() -> None:
    study = load_study(REPO / "studies" / "spark-four-engines.yaml")
    cells = expand_cells(LAB, study, ["local"], None)
    settings = {cell.key: effective_settings(cell.profile) for cell in cells}
    assert {s["prefix_caching"].value for s in settings.values() if s} == {"on"}  # Atlas' off by default
    assert {s["kv_cache_dtype"].value for s in settings.values() if s} == {"fp8"}  # Atlas' default, the others set
    found = settings_findings(settings)
    assert not any(line.startswith(("setting prefix caching", "setting KV-cache dtype")) for line in found)


def test_a_kv_bound_level_is_marked_in_the_result_and_the_report_with_the_engines_counters() -> None:
    telemetry = {"engine": {"preemptions": {"increase": 12.0, "per_s": 0.1}, "waiting": {"mean": 20.0, "max": 41.0}}}
    levels = [{"concurrency": c, "requests": 8, "completed": 8, "telemetry": telemetry} for c in (16, 120)]
    document = {
        "schema_version": 1,
        "bench_id": "b20261206-120000-aaaaaa",
        "run_id": "20261206-120000-aaaaaa",
        "target": {"engine": "vllm"},
        "workload": {"name": "long-context", "sha256": "0" * 64},
        "levels": levels,
    }
    marked = parse_result(mark_kv_bound(document, [120], 19))
    low, high = marked.levels
    assert low.kv_bound is None and high.kv_bound is not None and high.kv_bound.streams == 19
    assert high.kv_bound_text() == "KV-bound (cache holds ~19 streams): preemptions +12, waiting max 41"
    assert mark_kv_bound(document, [], None) is document
    lines = kv_bound_lines({"long-context": {"vllm.qwen3-32b": {120: [high, high], 16: [low]}}})
    assert lines == [
        "long-context vllm.qwen3-32b c=120: r1 KV-bound (cache holds ~19 streams): preemptions +12, waiting max 41; "
        "r2 KV-bound (cache holds ~19 streams): preemptions +12, waiting max 41"
    ]
    record = Record(
        run_id="20261206-120000-aaaaaa", status="stopped", engine="vllm", profile="p", served_model_name="m"
    )
    entries = [Entry("a", marked, record, {}), Entry("b", marked, record, {})]
    caveats = all_caveats(entries, checklist(entries))
    assert "A c=120: KV-bound (cache holds ~19 streams): preemptions +12, waiting max 41" in caveats
    without = parse_result(
        mark_kv_bound({**document, "levels": [{"concurrency": 120, "requests": 8, "completed": 8}]}, [120], 19)
    )
    assert without.levels[0].kv_bound_text() == (
        "KV-bound (cache holds ~19 streams): preemptions not exported, waiting not exported"
    )
