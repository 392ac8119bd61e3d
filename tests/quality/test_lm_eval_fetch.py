"""A task set whose data is a Hub dataset at a pinned commit: `labctl fetch --task` puts it into the HF cache
(datasets--ORG--NAME, resumable, progress, nothing twice), an evaluation before it is refused, and one after it
reads the snapshot offline and records the dataset's revision."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
import yaml
from helpers.harness_proc import free_port, harness
from helpers.loopback_hub import HubRepo, blob_id, loopback_hub, repo_from_folder
from helpers.records import copy_lab, harness_run_record
from helpers.support import REPO, run_labctl

pytestmark = pytest.mark.process

FIXTURE = REPO / "tests" / "fixtures" / "lm-eval" / "gsm-mini"
REPO_ID = "labctl-test/gsm-mini"


def test_fetch_a_task_dataset_then_evaluate_offline(tmp_path: Any) -> None:
    lab, home, cache = copy_lab(tmp_path), tmp_path / "home", tmp_path / "cache"
    dataset = repo_from_folder(REPO_ID, FIXTURE / "data", repo_type="dataset")
    folder = lab / "suites" / "lm-eval" / "gsm-hub"
    folder.mkdir(parents=True)
    shutil.copy(FIXTURE / "task.yaml", folder / "task.yaml")
    source = yaml.safe_load((FIXTURE / "source.yaml").read_text())
    source["dataset"] = {
        "repo": REPO_ID,
        "revision": dataset.commit,
        "format": "json",
        "files": {"test": "test.jsonl", "train": "train.jsonl"},
    }
    (folder / "source.yaml").write_text(yaml.safe_dump(source))
    offline = {
        "LABCTL_HOME": str(home),
        "LABCTL_CACHE_DIR": str(cache),
        "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}",
    }

    def labctl(*args: str, env: dict[str, str] | None = None) -> Any:
        return run_labctl(*args, lab=lab, env={**offline, **(env or {})}, timeout=180)

    early = labctl("suites", "lm-eval:gsm-hub", "--answer-map")
    assert early.code == 2 and "labctl fetch --task gsm-hub" in early.stderr
    snapshot = cache / "hub" / "datasets--labctl-test--gsm-mini" / "snapshots" / dataset.commit
    blob = cache / "hub" / "datasets--labctl-test--gsm-mini" / "blobs"
    blob.mkdir(parents=True)
    test_bytes = dataset.files["test.jsonl"]
    (blob / f"{blob_id(test_bytes)}.incomplete").write_bytes(test_bytes[:100])  # an interrupted fetch
    with loopback_hub({}) as hub:
        hub.add(dataset)
        online = {"HF_ENDPOINT": hub.endpoint}
        fetched = labctl("fetch", "--task", "gsm-hub", env=online)
        assert fetched.code == 0, fetched.stderr
        assert "resuming" in fetched.stderr and f"dataset {REPO_ID}@{dataset.commit}" in fetched.stdout
        total = sum(len(d) for d in dataset.files.values())
        assert hub.bytes_sent(REPO_ID) == total - 100
        again = labctl("fetch", "--task", "gsm-hub", "--json", env=online)
        assert again.code == 0 and json.loads(again.stdout)["cached"] is True
        assert hub.bytes_sent(REPO_ID) == total - 100
    assert (snapshot / "test.jsonl").read_bytes() == test_bytes
    mapped = labctl("suites", "lm-eval:gsm-hub", "--answer-map")
    assert mapped.code == 0, mapped.stderr
    answers = tmp_path / "answers.json"
    answers.write_text(mapped.stdout)
    with harness("--ttft-ms", "1", "--tpot-ms", "0", "--answers", str(answers), model="harness-smoke") as (base, _):
        run = harness_run_record(lab, home, base)
        done = labctl("eval", "run", run, "--suite", "lm-eval:gsm-hub", "--json")
    assert done.code == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    (task,) = result["tasks"]
    assert task["dataset"]["repo"] == REPO_ID and task["dataset"]["revision"] == dataset.commit
    assert task["dataset"]["source"] == f"{REPO_ID}@{dataset.commit}" and result["score"] == 1.0


def test_fetch_task_refusals(tmp_path: Any) -> None:
    lab = copy_lab(tmp_path)
    env = {"LABCTL_HOME": str(tmp_path / "home"), "LABCTL_CACHE_DIR": str(tmp_path / "cache")}
    local = run_labctl("fetch", "--task", "coding-basic", lab=lab, env=env)
    assert local.code == 2 and "nothing to fetch" in local.stderr
    both = run_labctl("fetch", "harness", "--task", "gsm8k", lab=lab, env=env)
    assert both.code == 2 and "give it alone" in both.stderr
    unknown = run_labctl("fetch", "--task", "../x", lab=lab, env=env)
    assert unknown.code == 2 and "Traceback" not in unknown.stderr
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    "suite, said",
    [
        ("lm-eval:", "is not a task set name"),
        ("lm-eval:../etc", "is not a task set name"),
        ("lm-eval:gsm8k,gsm8k", "named twice"),
        ("lm-eval:gsm8k@2", "version 2, but the lab's is 1"),
        ("lm-eval:gsm8k@$(x)", "is not a task set name"),
        ("lm-eval:" + ",".join(f"t{i}" for i in range(17)), "name 1 to 16 tasks"),
        ("lm-eval:nope", "unknown lm-eval task set 'nope'"),
        ("lm-eval:gsm8k", "labctl fetch --task gsm8k"),
    ],
)
def test_a_bad_task_suite_is_refused_before_anything_is_asked(tmp_path: Any, suite: str, said: str) -> None:
    env = {"LABCTL_HOME": str(tmp_path / "home"), "LABCTL_CACHE_DIR": str(tmp_path / "cache")}
    base = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: a refusal comes before any request
    done = run_labctl("eval", "run", "--base-url", base, "--model", "q", "--suite", suite, env=env)
    assert done.code == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "home" / "runs").exists()


def test_the_shipped_gsm8k_set_fetched_at_its_pinned_commit_and_answered(tmp_path: Any) -> None:
    """The shipped gsm8k set as it ships (parquet files at the pinned commit, 5-shot), its data a small sample
    in GSM8K's own layout served by the loopback Hub under that commit: nothing is downloaded from the Hub."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lab, home, cache = copy_lab(tmp_path), tmp_path / "home", tmp_path / "cache"
    source = yaml.safe_load((lab / "suites" / "lm-eval" / "gsm8k" / "source.yaml").read_text())
    pinned = source["dataset"]["revision"]
    rows = [json.loads(line) for line in (FIXTURE / "data" / "test.jsonl").read_text().splitlines()]
    files = {}
    for split, part in (("train", rows[:6]), ("test", rows[6:])):
        out = tmp_path / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist(part), out)
        files[source["dataset"]["files"][split]] = out.read_bytes()
    dataset = HubRepo("openai/gsm8k", files, repo_type="dataset")
    dataset.branches[pinned] = dataset.commit  # the sample answers for the pinned commit
    env = {"LABCTL_HOME": str(home), "LABCTL_CACHE_DIR": str(cache), "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    with loopback_hub({}) as hub:
        hub.add(dataset)
        fetched = run_labctl("fetch", "--task", "gsm8k", lab=lab, env={**env, "HF_ENDPOINT": hub.endpoint})
    assert fetched.code == 0, fetched.stderr
    assert (cache / "hub" / "datasets--openai--gsm8k" / "snapshots" / pinned / "main").is_dir()
    mapped = run_labctl("suites", "lm-eval:gsm8k", "--answer-map", lab=lab, env=env)
    assert mapped.code == 0, mapped.stderr
    answers = tmp_path / "answers.json"
    answers.write_text(mapped.stdout)
    assert len(json.loads(mapped.stdout)) == 6
    with harness("--ttft-ms", "1", "--tpot-ms", "0", "--answers", str(answers), model="harness-smoke") as (base, _):
        run = harness_run_record(lab, home, base)
        done = run_labctl("eval", "run", run, "--suite", "lm-eval:gsm8k", "--json", lab=lab, env=env, timeout=180)
    assert done.code == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    (task,) = result["tasks"]
    assert (task["task"], task["version"], task["num_fewshot"], task["filter"]) == ("gsm8k", "3.0", 5, "strict-match")
    assert task["dataset"]["source"] == f"openai/gsm8k@{pinned}" and result["score"] == 1.0
