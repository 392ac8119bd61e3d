"""labctl eval against the harness engine answering from a suite's reference answers (or wrongly, at
a fixed rate); model-written code runs only in the sandbox container."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from helpers.harness_proc import harness
from helpers.support import run_labctl

from labctl.catalog.lab import Lab
from labctl.harness.model import stable_seed
from labctl.quality.suites import load_suite


def answers_file(lab: Path, tmp_path: Path, *suites: str) -> Path:
    mapping: dict[str, str] = {}
    for name in suites:
        mapping |= load_suite(Lab(lab), name).answer_map()
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(mapping))
    return path


def evaluate(lab: Path, home: Path, base: str, suite: str, *args: str):  # type: ignore[no-untyped-def]
    return run_labctl(
        "eval",
        "--base-url",
        f"{base}/v1",
        "--model",
        "q",
        "--suite",
        suite,
        "--json",
        *args,
        lab=lab,
        env={"LABCTL_HOME": str(home)},
    )


@pytest.mark.parametrize("suite", ["short-answer", "json-format"])
@pytest.mark.process
def test_perfect_answers_score_100(lab: Path, tmp_path: Path, suite: str) -> None:
    with harness(
        "--ttft-ms", "1", "--tpot-ms", "0", "--answers", str(answers_file(lab, tmp_path, suite)), model="q"
    ) as (base, _):
        result = evaluate(lab, tmp_path / "h", base, suite)
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["score"] == 1.0 and doc["total"] == len(load_suite(Lab(lab), suite).cases)
    assert doc["suite"]["sha256"] == load_suite(Lab(lab), suite).sha256
    stored = tmp_path / "h" / "runs" / doc["run_id"] / "eval" / f"{doc['eval_id']}.json"
    assert json.loads(stored.read_text())["cases"][0]["settings"]["temperature"] == 0.0


@pytest.mark.docker
def test_coding_suite_perfect_then_wrong_and_diff(lab: Path, tmp_path: Path, docker_engine: None) -> None:
    home = tmp_path / "h"
    suite = load_suite(Lab(lab), "coding")
    assert len(suite.cases) >= 20
    answers = answers_file(lab, tmp_path, "coding")
    with harness("--ttft-ms", "1", "--tpot-ms", "0", "--answers", str(answers), model="q") as (base, _):
        perfect = json.loads(evaluate(lab, home, base, "coding").stdout)
    assert perfect["score"] == 1.0, [c for c in perfect["cases"] if not c["passed"]]
    rate, seed = 0.3, 7
    with harness(
        "--ttft-ms",
        "1",
        "--tpot-ms",
        "0",
        "--answers",
        str(answers),
        "--wrong-rate",
        str(rate),
        "--seed",
        str(seed),
        model="q",
    ) as (base, _):
        wrong = json.loads(evaluate(lab, home, base, "coding").stdout)
    expected = {c.id for c in suite.cases if random.Random(stable_seed("wrong", seed, c.prompt)).random() < rate}
    assert expected, "the seed should make some cases wrong"
    assert {c["id"] for c in wrong["cases"] if not c["passed"]} == expected
    low, high = wrong["score_ci95"]  # n/N with a 95 % interval that holds the score and excludes a perfect one
    assert wrong["passed"] == wrong["total"] - len(expected) and low <= wrong["score"] <= high < 1.0
    low, high = perfect["score_ci95"]  # a perfect score is not said to be certain (Wilson: 12/12 is 76-100 %)
    assert perfect["passed"] == perfect["total"] and 0.5 < low < 1.0 == high and "Wilson" in wrong["interval_method"]
    flips = run_labctl(
        "eval", "--diff", perfect["eval_id"], wrong["eval_id"], "--json", lab=lab, env={"LABCTL_HOME": str(home)}
    )
    assert flips.code == 0, flips.stderr
    assert {f["id"] for f in json.loads(flips.stdout)} == expected
    assert all(f["was"] == "pass" and f["now"] == "fail" for f in json.loads(flips.stdout))


@pytest.mark.docker
def test_hostile_code_is_killed_or_refused(lab: Path, tmp_path: Path, docker_engine: None) -> None:
    folder = lab / "suites" / "hostile"
    folder.mkdir(parents=True)
    cases = [
        {
            "id": "loops",
            "prompt": "Write f.",
            "check": {"kind": "python", "tests": "assert f() == 1", "timeout_s": 2},
            "reference": "def f():\n    return 1\n",
        },
        {
            "id": "network",
            "prompt": "Write g.",
            "check": {"kind": "python", "tests": "assert g()", "timeout_s": 5},
            "reference": "def g():\n    return True\n",
        },
        {
            "id": "exits",
            "prompt": "Write e.",
            "check": {"kind": "python", "tests": "assert e() == 1", "timeout_s": 5},
            "reference": "def e():\n    return 1\n",
        },
        {
            "id": "reads-secrets",
            "prompt": "Write h.",
            "check": {"kind": "python", "tests": "assert h()", "timeout_s": 5},
            "reference": "def h():\n    return True\n",
        },
    ]
    (folder / "suite.yaml").write_text(yaml.safe_dump({"version": "1", "description": "hostile", "cases": cases}))
    evil = {
        "Write f.": "def f():\n    while True:\n        pass",
        "Write g.": "import urllib.request\ndef g():\n    return urllib.request.urlopen('http://127.0.0.1:5000/v2/', timeout=2).status == 200",
        "Write e.": "import os\nprint('all tests passed')\nos._exit(0)",
        "Write h.": "import os\ndef h():\n    return 'LABCTL_SECRET' in os.environ or open('/etc/shadow').read()",
    }
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(evil))
    with harness("--ttft-ms", "1", "--tpot-ms", "0", "--answers", str(path), model="q") as (base, _):
        result = run_labctl(
            "eval",
            "--base-url",
            f"{base}/v1",
            "--model",
            "q",
            "--suite",
            "hostile",
            "--json",
            lab=lab,
            env={"LABCTL_HOME": str(tmp_path / "h"), "LABCTL_SECRET": "x"},
        )
    assert result.code == 0, result.stderr
    cases = {c["id"]: c for c in json.loads(result.stdout)["cases"]}
    assert not any(c["passed"] for c in cases.values())
    assert cases["loops"]["reason"] == "the answer did not answer call 1 (f) within the case's 2 s"
    assert (
        cases["exits"]["reason"] == "the answer exited (code 0) before the tests ran"
    )  # passed on the one-process sandbox
    assert "URLError" in cases["network"]["reason"] or "refused" in cases["network"]["reason"]
    assert "raised" in cases["reads-secrets"]["reason"] or "failed" in cases["reads-secrets"]["reason"]


@pytest.mark.process
def test_bad_suites(lab: Path, tmp_path: Path) -> None:
    env = {"LABCTL_HOME": str(tmp_path / "h")}
    result = run_labctl(
        "eval", "--base-url", "http://127.0.0.1:9/v1", "--model", "q", "--suite", "nope", lab=lab, env=env
    )
    assert result.code == 2 and "unknown suite 'nope'" in result.stderr
    folder = lab / "suites" / "broken"
    folder.mkdir(parents=True)
    (folder / "suite.yaml").write_text(
        "version: '1'\ndescription: x\ncases:\n  - id: a\n    prompt: hi\n"
        "    check: {kind: regex, pattern: '(unclosed'}\n    reference: hi\n"
    )
    result = run_labctl("suites", "broken", lab=lab, env=env)
    assert result.code == 2
    assert "suites/broken/suite.yaml:6: cases[0].check: pattern is not a valid regular expression" in result.stderr
    (folder / "suite.yaml").write_text(
        "version: '1'\ndescription: x\ncases:\n  - id: a\n    prompt: hi\n"
        "    check: {kind: exact, expected: '5'}\n    reference: '6'\n"
    )
    result = run_labctl("suites", "broken", lab=lab, env=env)
    assert result.code == 2 and "cases[0].reference: the reference answer fails its own check" in result.stderr
    (folder / "suite.yaml").write_text("version: '1'\ndescription: x\ncases:\n  - id: a\n    promt: hi\n")
    result = run_labctl("suites", "broken", lab=lab, env=env)
    assert result.code == 2 and "cases[0].promt: unknown field. Did you mean 'prompt'?" in result.stderr
    assert not (tmp_path / "h").exists()
