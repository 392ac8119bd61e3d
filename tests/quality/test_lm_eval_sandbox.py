"""The shipped coding task set through lm-evaluation-harness: every answer runs in labctl's sandbox, never on the
host, and hostile answers (a hang, the network, a faked success, the host's files) fail their case and touch
nothing here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.harness_proc import harness
from helpers.records import copy_lab, harness_run_record
from helpers.support import run_labctl

pytestmark = [pytest.mark.docker, pytest.mark.own_containers]


def test_coding_answers_run_in_the_sandbox_hostile_ones_fail(tmp_path: Path, docker_engine: None) -> None:
    lab, home = copy_lab(tmp_path), tmp_path / "home"
    env = {"LABCTL_HOME": str(home), "LABCTL_CACHE_DIR": str(tmp_path / "cache")}
    mapped = run_labctl("suites", "lm-eval:coding-basic", "--answer-map", lab=lab, env=env)
    assert mapped.code == 0, mapped.stderr
    answers: dict[str, str] = json.loads(mapped.stdout)
    marker = tmp_path / "written-by-the-answer"
    evil = {
        "add": "def add(a, b):\n    while True:\n        pass",
        "reverse_string": "import urllib.request\ndef reverse_string(s):\n"
        "    urllib.request.urlopen('http://127.0.0.1:5000/v2/', timeout=2)\n    return s[::-1]",
        "is_prime": "import os\nprint('all tests passed')\nos._exit(0)",
        "fizzbuzz": f"open({str(marker)!r}, 'w').write('x')\ndef fizzbuzz(n):\n    return open('/etc/shadow').read()",
    }
    hostile = set()
    for prompt in answers:
        for name, code in evil.items():
            if f"function {name}(" in prompt:
                answers[prompt] = f"```python\n{code}\n```"
                hostile.add(name)
    assert hostile == set(evil)
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(answers))
    with harness("--ttft-ms", "1", "--tpot-ms", "0", "--answers", str(path), model="harness-smoke") as (base, _):
        run = harness_run_record(lab, home, base)
        done = run_labctl(
            "eval", "run", run, "--suite", "lm-eval:coding-basic", "--json", lab=lab, env=env, timeout=300
        )
    assert done.code == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    failed = {c["id"] for c in result["cases"] if not c["passed"]}
    assert failed == {"coding-basic/0", "coding-basic/1", "coding-basic/2", "coding-basic/3"}
    assert result["passed"] == result["total"] - 4 and result["tasks"][0]["metric"] == "pass"
    assert not marker.exists()
