"""Study files, cells and fingerprints, in process: the checks that run before any host is asked anything."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from labctl.catalog.lab import Lab
from labctl.errors import BadInput
from labctl.study.cells import count_cells, expand_cells, file_key
from labctl.study.fingerprint import FIELDS, make_fingerprint
from labctl.study.gate import check_same_rules
from labctl.study.spec import load_study

STUDY = {
    "study": "unit",
    "model": {"id": "labctl/harness-synthetic", "revision": "v1", "quantization": "none"},
    "workloads": [{"name": "chat-sweep", "concurrency": [1, 4], "requests": 8}],
    "environment": "simulated",
    "profiles": [{"engine": "harness", "profile": "smoke", "overrides": {"max_num_seqs": [32, 64]}}],
    "hosts": ["a", "b"],
    "repeats": 2,
}


def write(tmp_path: Path, data: dict, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_good_file_expands_into_profile_x_grid_x_host_cells(tmp_path: Path, lab: Path) -> None:
    study = load_study(write(tmp_path, STUDY))
    cells = expand_cells(Lab(lab), study, study.hosts, port=47590)
    assert [c.key for c in cells] == [
        "harness.smoke+max_num_seqs=32@a",
        "harness.smoke+max_num_seqs=32@b",
        "harness.smoke+max_num_seqs=64@a",
        "harness.smoke+max_num_seqs=64@b",
    ]
    assert [c.profile.max_num_seqs for c in cells] == [32, 32, 64, 64]
    assert [c.profile.port for c in cells] == [47590, 47591, 47590, 47591]  # host i: port + i
    assert {c.placement.kind for c in cells} == {"host"}
    assert count_cells(study) == 8
    check_same_rules(study, cells)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"studdy": "x"}, "studdy: unknown field. Did you mean 'study'?"),
        ({"study": "Has Space"}, "study.yaml:1: study: 'Has Space' is not allowed"),
        ({"repeats": 0}, "study.yaml:"),
        ({"environment": "real-gpu"}, "environment: 'real-gpu' is not allowed"),
        ({"profiles": []}, "profiles: list is not allowed: expected a list of 1-16"),
        ({"hosts": ["a", "a"]}, "hosts:"),
        (
            {"profiles": [{"engine": "harness", "profile": "smoke", "overrides": {"max_num_seqs": ["many"]}}]},
            "profiles[0].overrides.max_num_seqs[0]: 'many' is not allowed",
        ),
        (
            {"profiles": [{"engine": "harness", "profile": "smoke", "overrides": {"image": ["x"]}}]},
            "profiles[0].overrides:",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_file_line_and_field(tmp_path: Path, change: dict, expected: str) -> None:
    with pytest.raises(BadInput) as caught:
        load_study(write(tmp_path, {**STUDY, **change}))
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message


def test_profiles_of_another_model_revision_are_refused_naming_field_and_cells(tmp_path: Path, lab: Path) -> None:
    smoke = yaml.safe_load((lab / "engines/harness/profiles/smoke.yaml").read_text())
    smoke["model"]["revision"] = "v2"
    (lab / "engines/harness/profiles/other-revision.yaml").write_text(yaml.safe_dump(smoke))
    data = {
        **STUDY,
        "hosts": ["a"],
        "profiles": [{"engine": "harness", "profile": "smoke"}, {"engine": "harness", "profile": "other-revision"}],
    }
    study = load_study(write(tmp_path, data))
    cells = expand_cells(Lab(lab), study, study.hosts)
    with pytest.raises(BadInput) as caught:
        check_same_rules(study, cells)
    message = str(caught.value)
    assert "model.revision differs across cells" in message
    assert "v2: harness.other-revision@a" in message and "v1: harness.smoke@a" in message


def test_a_fingerprint_names_the_fields_that_changed() -> None:
    args = ("cell@a", 1, "sha256:aa", "argv1", "c0ffee", {"chat": "w1"}, {"s": "1.1+ab"}, "1", "2x H100")
    first = make_fingerprint(*args)
    assert first.digest == make_fingerprint(*args).digest
    assert first.changed(first.fields) == []
    assert first.changed(None) == list(FIELDS)
    moved = make_fingerprint("cell@a", 1, "sha256:bb", *args[3:])
    assert moved.changed(first.fields) == ["image"]
    assert make_fingerprint("cell@a", 2, *args[2:]).changed(first.fields) == ["repeat"]


def test_state_file_names_are_safe_and_distinct() -> None:
    a, b = file_key("vllm.x+args[--a,1]@h", 1), file_key("vllm.x+args[--a_1]@h", 1)
    assert a != b
    assert all(ch.isalnum() or ch in "._-[]" for ch in a)
    assert "/" not in file_key("../../etc@h", 1)


def test_the_same_name_from_another_file_is_refused(tmp_path: Path) -> None:
    from labctl.study.state import open_state

    home = tmp_path / "home"
    first = load_study(write(tmp_path, STUDY, "first.yaml"))
    state = open_state(home, first)
    assert state.about()["file"] == str(first.path)
    assert open_state(home, first).folder == state.folder  # the same file again: its own state
    with pytest.raises(BadInput, match="belongs to .*first.yaml"):
        open_state(home, load_study(write(tmp_path, STUDY, "second.yaml")))


def test_every_shipped_study_reads_and_passes_the_same_rules_gate() -> None:
    from helpers.support import REPO

    lab = Lab(REPO)
    shipped = sorted((REPO / "studies").glob("*.yaml"))
    assert {p.stem for p in shipped} >= {"harness-demo", "h100-qwen3-32b", "spark-four-engines", "cpu-real"}
    for path in shipped:
        study = load_study(path)
        assert study.name == path.stem
        if any(not (REPO / "engines" / e.engine / "profiles" / f"{e.profile}.yaml").is_file() for e in study.entries):
            continue  # cpu-real: its tiny-model profiles come with the real-engine step, which owns its test
        check_same_rules(study, expand_cells(lab, study, study.hosts or ["local"]))


def test_failures_are_classified_and_flakes_marked_for_one_more_try() -> None:
    from labctl.bench.results import level_from_json
    from labctl.study.failures import classify_start, meets_slo

    assert classify_start("vllm/x does not fit the free memory of GPU(s) 0") == ("start: memory", False)
    assert classify_start("pulling repo@sha256:aa failed: manifest unknown") == ("start: pull", True)
    assert classify_start("ssh: connect to host 10.0.0.5 port 22: Connection refused") == ("start: ssh", True)
    assert classify_start("the engine was not ready after 900 s") == ("start: readiness timeout", False)
    assert classify_start("something else") == ("start: other", False)
    assert classify_start("port 8000 is already allocated") == ("start: other", False)  # not "ready"
    assert classify_start("cannot reach ssh://lab@10.0.0.5: no route") == ("start: other", False)
    assert classify_start("ssh: Could not resolve hostname gpu7") == ("start: ssh", True)
    assert meets_slo(level_from_json({"concurrency": 1, "goodput": 9.5, "request_throughput": 10.0}))
    assert not meets_slo(level_from_json({"concurrency": 1, "goodput": 8.0, "request_throughput": 10.0}))
    assert not meets_slo(
        level_from_json({"concurrency": 1, "goodput": 10.0, "request_throughput": 10.0, "partial": True})
    )


def test_verdicts_say_not_distinguishable_only_where_intervals_overlap() -> None:
    from labctl.bench.results import Level, level_from_json
    from labctl.study.report import slo_lines, verdicts

    def level(tput: float, ttft: float) -> Level:
        return level_from_json(
            {
                "concurrency": 4,
                "output_throughput": tput,
                "median_ttft_ms": ttft,
                "goodput": 1.0,
                "request_throughput": 1.0,
            }
        )

    per_cell = {
        "chat": {
            "a@h": {4: [level(100, 20), level(102, 21), level(101, 20)]},
            "b@h": {4: [level(101, 40), level(99, 41), level(100, 42)]},
        }
    }
    lines = verdicts(per_cell)
    assert any("output tokens/s" in line and line.endswith("not distinguishable") for line in lines)
    assert any("TTFT p50" in line and line.endswith("b@h higher") for line in lines)
    assert slo_lines(per_cell)[0].startswith("chat a@h: c=4, 1 req/s over 3 repeat(s), 95% [1, 1]")


@pytest.mark.process
def test_a_study_names_lm_eval_task_sets_with_their_versions(tmp_path: Path, lab: Path) -> None:
    from labctl.study.plan import TaskSuite, study_suites

    suites = [{"name": "lm-eval:gsm8k", "version": "1"}, {"name": "short-answer"}]
    study = load_study(write(tmp_path, {**STUDY, "suites": suites}))
    chosen = study_suites(Lab(lab), study)
    task = chosen["lm-eval:gsm8k"]
    assert isinstance(task, TaskSuite) and task.version == "1" and "openai/gsm8k@" in task.full_version
    (lab / "suites" / "lm-eval" / "gsm8k" / "task.yaml").write_text("changed: true\n")
    changed = study_suites(Lab(lab), study)["lm-eval:gsm8k"]
    assert changed.full_version != task.full_version  # an edited task set changes every cell's fingerprint
    wrong = load_study(write(tmp_path, {**STUDY, "suites": [{"name": "lm-eval:gsm8k", "version": "9"}]}, "w.yaml"))
    with pytest.raises(BadInput, match="version"):
        study_suites(Lab(lab), wrong)
    with pytest.raises(BadInput, match="suites"):
        load_study(write(tmp_path, {**STUDY, "suites": [{"name": "lm-eval:Bad Name"}]}, "b.yaml"))


def test_a_grid_too_large_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    """Five overrides of 16 values each would be a million cells: refused from the product, in a moment."""
    many: dict[str, list] = {key: list(range(1, 17)) for key in ("max_num_seqs", "max_model_len", "max_batch_size")}
    many["gpu_memory_utilization"] = [round(0.05 * i, 2) for i in range(1, 17)]
    many["extra_args"] = [[f"--x{i}"] for i in range(16)]
    huge = {**STUDY, "profiles": [{"engine": "harness", "profile": "smoke", "overrides": many}]}
    started = time.monotonic()
    with pytest.raises(BadInput) as refused:
        load_study(write(tmp_path, huge))
    assert time.monotonic() - started < 2
    said = str(refused.value)
    assert "(1048576) grid cells x 2 host(s) x 2 repeat(s) = 4194304" in said and "more than 512" in said, said
    assert "study.yaml:" in said and "\n" not in said
    assert count_cells(load_study(write(tmp_path, STUDY, "fits.yaml"))) == 2 * 2 * 2


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"repeat": "x"}, "repeat: expected int, found str"),
        ({"repeat": 0}, "repeat: 0 is below 1"),
        ({"benches": 5}, "benches: expected list, found int"),
        ({"benches": [{"workload": "w"}]}, "benches: each entry is a mapping with a bench_id"),
        ({"times": {"cold_start_s": "slow"}}, "times: each value is a number of seconds"),
        ({"state": None}, "state: expected str, found NoneType"),
    ],
)
def test_a_cell_state_of_the_wrong_shape_is_one_line_and_measured_again(
    tmp_path: Path, change: dict, said: str
) -> None:
    from labctl.study.progress import study_status
    from labctl.study.state import StudyState

    state = StudyState(tmp_path / "s")
    state.cells_dir.mkdir(parents=True)
    good = {
        "cell": "harness.smoke@local", "repeat": 1, "state": "done", "benches": [], "evals": [], "times": {},
        "caveats": [], "findings": [], "censored": {}, "run_id": None, "failure": None, "host": "local",
        "started_at": None, "finished_at": None,
    }  # fmt: skip
    state.save_cell(dict(good))
    state.save_cell({**good, "cell": "harness.other@local"})
    bad = state.cell_path("harness.other@local", 1)
    bad.write_text(json.dumps({**good, "cell": "harness.other@local", **change}))
    lines: list[str] = []
    shown = study_status(state, 2, lines.append)
    assert [c["cell"] for c in shown["cells"]] == ["harness.smoke@local"]
    assert len(lines) == 1 and said in lines[0] and str(bad) in lines[0] and "\n" not in lines[0], lines
    assert state.load_cell("harness.other@local", 1) is None  # redone, never trusted
