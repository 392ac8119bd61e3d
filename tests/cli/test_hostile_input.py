"""Files and flags from a hostile colleague, through the real CLI: each is one `Error:` line, exit 2,
no traceback, nothing written, and it comes back in seconds."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.support import Result, run_labctl

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers

# Small enough that the old loader finished (and failed the assertion) instead of eating the host.
BOMB = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 8)}]\n" for i in range(1, 7)
)


def refused(result: Result, start: str, *words: str) -> None:
    assert result.code == 2, result
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"Error: {start}"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def _plant(lab: Path, rel: str, text: str) -> None:
    path = lab / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    "rel, args",
    [
        ("engines/vllm/profiles/bomb.yaml", ("render", "vllm", "--profile", "bomb")),
        ("engines/vllm/engine.yaml", ("render", "vllm", "--profile", "qwen3-32b")),
        ("workloads/bomb.yaml", ("workloads",)),
        ("suites/bomb/suite.yaml", ("suites",)),
    ],
)
@pytest.mark.parametrize("text", [BOMB, "a: &x [*x]\n"], ids=["laughs", "self-alias"])
def test_alias_bombs_are_refused_in_every_lab_file(lab: Path, rel: str, args: tuple[str, ...], text: str) -> None:
    _plant(lab, rel, text)
    result = run_labctl(*args, lab=lab, timeout=30)
    if args in (("workloads",), ("suites",)):  # a listing: the bad file on its own line, the others listed, exit 1
        kind, other = ("workload", "chat-sweep") if args == ("workloads",) else ("suite", "short-answer")
        assert result.code == 1 and other in result.stdout and "Traceback" not in result.stderr, result
        assert result.stderr.startswith(f"skipped {kind} bomb: {rel}:1: ") and result.stderr.count("\n") == 1
        assert "anchor or alias" in result.stderr
    else:
        refused(result, f"{rel}:1: ", "anchor or alias")
    assert list((lab / "compose").iterdir()) == []


@pytest.mark.parametrize("text", [BOMB, "a: &x [*x]\n"], ids=["laughs", "self-alias"])
def test_alias_bombs_are_refused_in_exports(lab: Path, tmp_path: Path, text: str) -> None:
    export = tmp_path / "alice-run.yaml"
    export.write_text(text)
    refused(run_labctl("diff", str(export), str(export), lab=lab, timeout=30), f"{export}:1: ", "anchor or alias")


NOWHERE = ("--base-url", "http://127.0.0.1:9/v1", "--model", "m")


@pytest.mark.parametrize(
    "args, option",
    [
        (("up", "harness", "--profile", "smoke", "--timeout", "nan"), "--timeout nan"),
        (("up", "harness", "--profile", "smoke", "--timeout", "-1"), "--timeout -1"),
        (("up", "harness", "--profile", "smoke", "--timeout", "inf"), "--timeout inf"),
        (("reproduce", "alice.yaml", "--timeout", "-1"), "--timeout -1"),
        (
            ("bench", "run", *NOWHERE, "--workload", "latency-probe", "--request-timeout", "nan"),
            "--request-timeout nan",
        ),
        (("bench", "run", *NOWHERE, "--workload", "latency-probe", "--request-timeout", "0"), "--request-timeout 0"),
        (
            ("bench", "run", *NOWHERE, "--workload", "latency-probe", "--requests", "1000000000"),
            "--requests 1000000000",
        ),
        (("bench", "run", *NOWHERE, "--workload", "latency-probe", "--concurrency", "1,100000"), "--concurrency"),
        (("eval", "run", *NOWHERE, "--suite", "short-answer", "--timeout", "inf"), "--timeout inf"),
        (("eval", "run", *NOWHERE, "--suite", "short-answer", "--concurrency", "100000"), "--concurrency 100000"),
    ],
)
def test_numeric_flags_are_refused_before_anything_starts(
    lab: Path, tmp_path: Path, args: tuple[str, ...], option: str
) -> None:
    home = tmp_path / "home"
    result = run_labctl(*args, lab=lab, env={"LABCTL_HOME": str(home)}, timeout=30)
    refused(result, option)
    assert not home.exists()


def test_format_spec_in_engine_args_is_refused_before_render(lab: Path) -> None:
    engine = lab / "engines/vllm/engine.yaml"
    text = engine.read_text()
    assert '["--port", "{port}"]' in text
    engine.write_text(text.replace('["--port", "{port}"]', '["--port", "{port:>1000000}"]'))
    result = run_labctl("render", "vllm", "--profile", "qwen3-32b", lab=lab, timeout=60)
    refused(result, "engines/vllm/engine.yaml:16: server.args[4][1]: ", "not a plain placeholder")
    assert list((lab / "compose").iterdir()) == []


CATASTROPHIC = """\
version: '1'
description: a pattern that backtracks for hours on the wrong answer
cases:
- id: ok
  prompt: Say b.
  check: {kind: regex, pattern: 'b'}
  reference: b
- id: slow
  prompt: Say a b.
  check: {kind: regex, pattern: '(a|a)*b'}
  reference: b
"""


def test_catastrophic_suite_regex_does_not_hang_suites(lab: Path) -> None:
    slow = CATASTROPHIC.replace("'(a|a)*b'}\n  reference: b", "'(a|a)*b'}\n  reference: " + "a" * 40)
    assert slow != CATASTROPHIC
    _plant(lab, "suites/slow/suite.yaml", slow)
    result = run_labctl("suites", lab=lab, timeout=60)  # said on its own line; the other suites still listed
    assert result.code == 1 and "short-answer" in result.stdout and result.stderr.count("\n") == 1, result
    assert result.stderr.startswith("skipped suite slow: suites/slow/suite.yaml:"), result.stderr
    assert "time limit" in result.stderr and "reference answer fails its own check" in result.stderr


def test_catastrophic_suite_regex_on_a_hostile_answer_fails_that_case(lab: Path, tmp_path: Path) -> None:
    import json

    from helpers.harness_proc import harness

    _plant(lab, "suites/slow/suite.yaml", CATASTROPHIC)
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({"Say b.": "b", "Say a b.": "a" * 40}))
    with harness("--ttft-ms", "1", "--tpot-ms", "0", "--answers", str(answers), model="q") as (base, _):
        result = run_labctl(
            "eval",
            *("run", "--base-url", f"{base}/v1", "--model", "q", "--suite", "slow", "--json"),
            lab=lab,
            env={"LABCTL_HOME": str(tmp_path / "home")},
            timeout=60,
        )
    assert result.code == 0, result.stderr
    cases = {c["id"]: c for c in json.loads(result.stdout)["cases"]}
    assert cases["ok"]["passed"] and not cases["slow"]["passed"]
    assert "time limit" in cases["slow"]["reason"]


def test_env_names_with_a_trailing_newline_are_refused(lab: Path) -> None:
    profile = lab / "engines/vllm/profiles/qwen3-32b.yaml"
    text = profile.read_text()
    assert "env: [HF_TOKEN]" in text
    profile.write_text(text.replace("env: [HF_TOKEN]", 'env: ["HF_TOKEN\\n"]'))
    result = run_labctl("render", "vllm", "--profile", "qwen3-32b", lab=lab, timeout=30)
    refused(result, "engines/vllm/profiles/qwen3-32b.yaml:20: env[0]: ", "variable name")


RUN = "20261203-015815-a1b2c3"


def _home_with_a_secret(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    for folder in ("bench", "eval"):
        (home / "runs" / RUN / folder).mkdir(parents=True)
    (home / "runs" / RUN / "record.json").write_text("{}")
    (home / "secret.json").write_text('{"secret": "outside runs"}')
    return home


@pytest.mark.parametrize(
    "args, what",
    [
        (("bench", "show", "../../../secret"), "is not a bench id"),
        (("bench", "show", "b../../../secret"), "is not a bench id"),
        (("eval", "diff", "../../../secret", "../../../secret"), "is not an evaluation id"),
        (("compare", "b../../../secret", "b../../../other"), "neither a run id nor a bench id"),
    ],
)
def test_ids_cannot_reach_outside_runs(lab: Path, tmp_path: Path, args: tuple[str, ...], what: str) -> None:
    home = _home_with_a_secret(tmp_path)
    result = run_labctl(*args, lab=lab, env={"LABCTL_HOME": str(home)}, timeout=30)
    refused(result, "", what)
    assert "outside runs" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "rel, args",
    [
        ("engines/vllm/profiles/evil.yaml", ("render", "vllm", "--profile", "evil")),
        ("workloads/evil.yaml", ("bench", "run", *NOWHERE, "--workload", "evil")),
        ("suites/evil/suite.yaml", ("suites", "evil")),
    ],
)
def test_lab_files_symlinked_from_outside_are_refused(
    lab: Path, tmp_path: Path, rel: str, args: tuple[str, ...]
) -> None:
    source = {"engines": "engines/vllm/profiles/qwen3-32b.yaml", "workloads": "workloads/latency-probe.yaml"}
    outside = tmp_path / "outside.yaml"
    outside.write_text((lab / source.get(rel.split("/")[0], "suites/short-answer/suite.yaml")).read_text())
    (lab / rel).parent.mkdir(parents=True, exist_ok=True)
    (lab / rel).symlink_to(outside)
    result = run_labctl(*args, lab=lab, env={"LABCTL_HOME": str(tmp_path / "home")}, timeout=30)
    refused(result, rel, "leads outside the lab folder")
    assert list((lab / "compose").iterdir()) == []


def test_a_dataset_path_cannot_send_host_files_as_prompts(lab: Path, tmp_path: Path) -> None:
    from helpers.harness_proc import harness

    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"prompt": "the host secret"}\n')
    _plant(
        lab,
        "workloads/evil.yaml",
        f"description: d\ndataset: {{kind: jsonl, path: '../../{secret.name}'}}\nrequests: 1\nconcurrency: [1]\n",
    )
    with harness("--ttft-ms", "1", "--tpot-ms", "0", model="m") as (base, _):
        result = run_labctl(
            *("bench", "run", "--base-url", f"{base}/v1", "--model", "m", "--workload", "evil"),
            lab=lab,
            env={"LABCTL_HOME": str(tmp_path / "home")},
            timeout=60,
        )
    refused(result, "workloads/evil.yaml:2: dataset.path: ", "no '..'")
