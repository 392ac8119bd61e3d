"""lm-evaluation-harness task sets against harness engines answering from the task's own answer map: a run's
evaluation end to end (record, every sample, dataset revision and hash), the key kept out of every file, the
paired verdict of two runs made to differ on known cases, and refusals when a task's version or its data differ."""

from __future__ import annotations

import hashlib
import json
import shutil
from typing import Any

import pytest
import yaml
from helpers.harness_proc import harness
from helpers.records import copy_lab, harness_run_record
from helpers.support import REPO, run_labctl

pytestmark = pytest.mark.process

FIXTURE = REPO / "tests" / "fixtures" / "lm-eval" / "gsm-mini"
WRONG = (1, 2, 4, 6, 7, 9, 11)  # the cases B answers wrongly: 7 discordant, p = 2/2^7 < 0.05
KEY = "sk-labctl-test-key-0123456789abcdef"
SUITE = "lm-eval:gsm-mini"


def labctl(world: dict[str, Any], *args: str) -> Any:
    return run_labctl(*args, lab=world["lab"], env={"LABCTL_HOME": str(world["home"])}, timeout=180)


def fresh_run(world: dict[str, Any], base: str, profile: str = "smoke") -> str:
    return harness_run_record(world["lab"], world["home"], base, profile_name=profile)


def evaluate(world: dict[str, Any], run: str) -> dict[str, Any]:
    done = labctl(world, "eval", "run", run, "--suite", SUITE, "--json")
    assert done.code == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("lm-eval")
    lab, home = copy_lab(root), root / "home"
    shutil.copytree(FIXTURE, lab / "suites" / "lm-eval" / "gsm-mini")
    smoke = yaml.safe_load((lab / "engines" / "harness" / "profiles" / "smoke.yaml").read_text())
    smoke["model"]["quantization"] = "fp8"  # the same model served another way: a second harness profile
    engine = lab / "engines" / "harness" / "engine.yaml"
    engine.write_text(engine.read_text().replace("synthetic: [none]", "synthetic: [none, fp8]"))
    (lab / "engines" / "harness" / "profiles" / "smoke-fp8.yaml").write_text(yaml.safe_dump(smoke))
    world: dict[str, Any] = {"lab": lab, "home": home, "root": root}
    mapped = labctl(world, "suites", SUITE, "--answer-map")
    assert mapped.code == 0, mapped.stderr[-2000:]
    right: dict[str, str] = json.loads(mapped.stdout)
    assert len(right) == 12 and all("Answer:" in prompt for prompt in right)
    prompts = list(right)  # in document order
    wrong = {p: ("#### 0" if i in WRONG else a) for i, (p, a) in enumerate(right.items())}
    files = {}
    for name, answers in (("a", right), ("b", wrong)):
        files[name] = root / f"answers-{name}.json"
        files[name].write_text(json.dumps(answers))
    (root / "keys").write_text(KEY + "\n")
    common = ("--ttft-ms", "1", "--tpot-ms", "0", "--api-key-file", str(root / "keys"))
    with (
        harness(*common, "--answers", str(files["a"]), model="harness-smoke") as (base_a, _),
        harness(*common, "--answers", str(files["b"]), model="harness-smoke") as (base_b, _),
    ):
        world["a"], world["b"] = fresh_run(world, base_a), fresh_run(world, base_b, "smoke-fp8")
        for side in ("a", "b"):
            bench = run_labctl(
                "bench",
                "run",
                world[side],
                "--workload",
                "latency-probe",
                "--requests",
                "4",
                "--api-key-env",
                "LABCTL_TEST_KEY",
                lab=lab,
                env={"LABCTL_HOME": str(home), "LABCTL_TEST_KEY": KEY},
            )
            assert bench.code == 0, bench.stderr[-2000:]
            done = run_labctl(
                "eval",
                "run",
                world[side],
                "--suite",
                SUITE,
                "--api-key-env",
                "LABCTL_TEST_KEY",
                "--json",
                lab=lab,
                env={"LABCTL_HOME": str(home), "LABCTL_TEST_KEY": KEY},
                timeout=180,
            )
            assert done.code == 0, done.stderr[-2000:]
            world[f"eval_{side}"] = json.loads(done.stdout)
        world["prompts"] = prompts
        world["base_b"] = base_b
        yield world


def test_a_task_end_to_end_record_samples_and_dataset(world: dict[str, Any]) -> None:
    result = world["eval_a"]
    assert result["score"] == 1.0 and result["total"] == 12 and result["harness"]["version"] == "0.4.13"
    (task,) = result["tasks"]
    assert task["name"] == "gsm-mini" and task["task"] == "gsm_mini" and task["version"] == "3.0"
    assert task["num_fewshot"] == 2 and task["metric"] == "exact_match" and task["filter"] == "strict-match"
    assert task["value"] == 1.0 and task["stderr"] == 0.0 and task["generation"]["until"][0] == "Question:"
    data = FIXTURE / "data"
    expected = hashlib.sha256(
        "".join(
            f"{split}:{hashlib.sha256((data / f'{split}.jsonl').read_bytes()).hexdigest()}\n"
            for split in ("test", "train")
        ).encode()
    ).hexdigest()
    assert task["dataset"]["revision"] == "local" and task["dataset"]["sha256"] == expected
    eval_dir = world["home"] / "runs" / world["a"] / "eval"
    samples = [json.loads(line) for line in (eval_dir / result["samples_file"]).read_text().splitlines()]
    assert [s["doc_id"] for s in samples] == list(range(12))
    questions = [json.loads(line)["question"] for line in (data / "test.jsonl").read_text().splitlines()]
    for sample, question in zip(samples, questions, strict=True):
        assert question in sample["input"] and sample["input"].count("Question:") == 3  # two shots, then the case
        assert sample["target"].endswith(sample["filtered"]) and sample["score"] == 1.0 and "####" in sample["output"]


def test_the_key_is_in_no_record_result_or_sample(world: dict[str, Any]) -> None:
    written = [p for p in world["home"].rglob("*") if p.is_file()]
    assert any(p.name.endswith(".samples.jsonl") for p in written)
    assert [str(p) for p in written if KEY.encode() in p.read_bytes()] == []


def test_paired_verdict_diff_and_compare_of_two_profiles(world: dict[str, Any]) -> None:
    a, b = world["eval_a"], world["eval_b"]
    assert b["passed"] == 12 - len(WRONG)
    diff = labctl(world, "eval", "diff", a["eval_id"], b["eval_id"])
    assert diff.code == 0, diff.stderr
    assert f"both right {12 - len(WRONG)}, both wrong 0, only A {len(WRONG)}, only B 0" in diff.stdout
    assert "A better" in diff.stdout
    flipped = json.loads(labctl(world, "eval", "diff", a["eval_id"], b["eval_id"], "--json").stdout)
    assert [f["id"] for f in flipped] == [f"gsm-mini/{i}" for i in WRONG]
    assert all("####" in f["output_was"] and f["output_now"] == "#### 0" for f in flipped)
    shown = labctl(world, "compare", world["a"], world["b"])
    assert shown.code == 0, shown.stdout + shown.stderr
    assert "exact McNemar" in shown.stdout and "A better" in shown.stdout
    assert "quantization none" in shown.stdout and "quantization fp8" in shown.stdout
    paired = json.loads(labctl(world, "compare", world["a"], world["b"], "--json").stdout)["quality_paired"]
    assert [(p["only_a"], p["only_b"], p["verdict"]) for p in paired] == [(len(WRONG), 0, "A better")]
    reverse = json.loads(labctl(world, "compare", world["b"], world["a"], "--json").stdout)["quality_paired"]
    assert reverse[0]["verdict"] == "B better" and reverse[0]["p_value"] == pytest.approx(2 / 2 ** len(WRONG))
    report = labctl(world, "report", world["a"], world["b"], "-o", str(world["root"] / "report"))
    assert report.code == 0, report.stderr
    assert "A better" in (world["root"] / "report" / "report.md").read_text()


@pytest.mark.parametrize("change", ["task version", "dataset revision"])
def test_refused_when_the_task_version_or_its_data_differ(world: dict[str, Any], change: str) -> None:
    folder = world["lab"] / "suites" / "lm-eval" / "gsm-mini"
    path = folder / ("task.yaml" if change == "task version" else "data/test.jsonl")
    before = path.read_text()
    changed = before.replace("version: 3.0", "version: 4.0") if change == "task version" else before + before[:0]
    if change == "dataset revision":
        changed = before.replace("Tom has 3 apples", "Tom has 3 red apples")
    path.write_text(changed)
    try:
        with harness("--ttft-ms", "1", "--tpot-ms", "0", model="harness-smoke") as (base, _):
            run = fresh_run(world, base)
            assert labctl(world, "bench", "run", run, "--workload", "latency-probe", "--requests", "2").code == 0
            other = evaluate(world, run)
    finally:
        path.write_text(before)
    refused = labctl(world, "compare", world["a"], run)
    assert refused.code == 2 and "✗ quality suite version" in refused.stdout
    diff = labctl(world, "eval", "diff", world["eval_a"]["eval_id"], other["eval_id"])
    said = "gsm-mini: task version gsm_mini v3.0" if change == "task version" else "gsm-mini: dataset hash"
    assert diff.code == 2 and said in diff.stderr


def test_an_endpoint_that_fails_is_one_line_without_the_key_and_nothing_recorded(world: dict[str, Any]) -> None:
    faults = ("--error-rate", "1.0", "--api-key-file", str(world["root"] / "keys"))
    with harness("--ttft-ms", "1", "--tpot-ms", "0", *faults, model="harness-smoke") as (base, _):
        run = fresh_run(world, base)
        failed = run_labctl(
            "eval",
            "run",
            run,
            "--suite",
            SUITE,
            "--api-key-env",
            "LABCTL_TEST_KEY",
            lab=world["lab"],
            env={"LABCTL_HOME": str(world["home"]), "LABCTL_TEST_KEY": KEY},
            timeout=180,
        )
    assert failed.code == 1 and failed.stderr.startswith("Error: lm-evaluation-harness stopped (")
    assert KEY not in failed.stdout + failed.stderr and "Traceback" not in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
    assert not (world["home"] / "runs" / run / "eval").exists()
