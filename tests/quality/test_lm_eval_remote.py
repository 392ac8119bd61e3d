"""An lm-eval task set against a resident run on the remote lab host labb: asked through labctl's SSH forward,
with the run's stored key (a request header, never `model_args`), which no record, result or sample holds.
Only loopback and labb's own address are used."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers.lifecycle_helpers import write_profile
from helpers.records import copy_lab
from helpers.support import REPO, Result, free_labb_port, labb_entry, remove_labb_runs, run_labctl

pytestmark = [pytest.mark.docker, pytest.mark.lab, pytest.mark.labb]  # labb's own tier: one test at a time

FIXTURE = REPO / "tests" / "fixtures" / "lm-eval" / "gsm-mini"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "home"
    folder.mkdir()
    yield folder
    remove_labb_runs(folder)


def test_a_resident_labb_run_evaluated_through_the_forward_with_its_key(tmp_path: Path, home: Path) -> None:
    lab = copy_lab(tmp_path)
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"labb": labb_entry()}}))
    shutil.copytree(FIXTURE, lab / "suites" / "lm-eval" / "gsm-mini")
    env = {"LABCTL_HOME": str(home), "LABCTL_LOCK_FILE": str(home / "gpus.lock")}

    def labctl(*args: str) -> Result:
        return run_labctl(*args, lab=lab, env=env, timeout=240)

    write_profile(lab, "res", free_labb_port())
    up = labctl("up", "harness", "--profile", "res", "--allow-unpinned", "--host", "labb", "--resident", "--json")
    assert up.code == 0, up.stderr
    run_id = json.loads(up.stdout.strip().splitlines()[-1])["run_id"]
    key = json.loads(labctl("share", run_id, "--json").stdout)["api_key"]
    record = json.loads((home / "runs" / run_id / "record.json").read_text())
    forward = record["forward"]
    assert forward and record["resident"]

    done = labctl("eval", "run", run_id, "--suite", "lm-eval:gsm-mini", "--json")
    assert done.code == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["run_id"] == run_id and result["total"] == 12  # the harness answers filler: the pipe is the point
    assert result["target"]["base_url"].startswith("http://127.0.0.1:") and "labb" not in result["target"]["base_url"]
    assert result["tasks"][0]["dataset"]["revision"] == "local" and all(c["output"] for c in result["cases"])
    written = [p for p in (home / "runs" / run_id).rglob("*") if p.is_file()]
    assert any(p.name.endswith(".samples.jsonl") for p in written)
    assert [str(p) for p in written if key.encode() in p.read_bytes()] == []
    assert labctl("down", run_id).code == 0
