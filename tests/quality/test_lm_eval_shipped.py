"""Any task lm-evaluation-harness ships (issue 36, item 5): `labctl fetch --task NAME` pins the dataset the
harness's own task reads (its commit now, the files of its splits, from the README's configs or the Hub's
layout) into suites/lm-eval/NAME/source.yaml and fetches them; `eval run --suite lm-eval:NAME` then runs it
offline. A multiple-choice task is scored by log-likelihood through the engine's completions and its own
tokenizer (the harness engine serves both); `--limit N` is a smoke run that is never compared with a full one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from helpers.harness_proc import free_port, harness
from helpers.loopback_hub import loopback_hub, repo_from_folder
from helpers.records import copy_lab, harness_run_record
from helpers.support import run_labctl

pytestmark = pytest.mark.process

ARC_CARD = """---
configs:
- config_name: ARC-Easy
  data_files:
  - split: train
    path: ARC-Easy/train-*
  - split: validation
    path: ARC-Easy/validation-*
  - split: test
    path: ARC-Easy/test-*
---
# a small stand-in for allenai/ai2_arc, made by the test
"""


def _arc(n: int, offset: int) -> list[dict[str, Any]]:
    """Questions whose right choice moves around, so that always picking one position cannot score."""
    rows = []
    for i in range(offset, offset + n):
        texts = [f"stone {i}", f"water {i}", f"light {i}", f"sound {i}"]
        rows.append(
            {
                "id": f"q{i}",
                "question": f"Which of these is item number {i}?",
                "choices": {"text": texts, "label": ["A", "B", "C", "D"]},
                "answerKey": "ABCD"[i % 4],
            }
        )
    return rows


def _gsm(n: int, offset: int) -> list[dict[str, Any]]:
    return [
        {"question": f"What is {i} plus {i}?", "answer": f"{i} plus {i} is {2 * i}.\n#### {2 * i}"}
        for i in range(offset, offset + n)
    ]


def _parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("hub")
    arc = root / "arc"
    (arc / "README.md").parent.mkdir(parents=True)
    (arc / "README.md").write_text(ARC_CARD)
    _parquet(arc / "ARC-Easy" / "train-00000-of-00001.parquet", _arc(4, 100))
    _parquet(arc / "ARC-Easy" / "validation-00000-of-00001.parquet", _arc(2, 200))
    _parquet(arc / "ARC-Easy" / "test-00000-of-00001.parquet", _arc(6, 0))
    _parquet(arc / "ARC-Challenge" / "test-00000-of-00001.parquet", _arc(2, 300))  # another config: not fetched
    gsm = root / "gsm"  # no dataset card: the Hub's own layout (CONFIG/SPLIT-*)
    _parquet(gsm / "main" / "train-00000-of-00001.parquet", _gsm(8, 50))
    _parquet(gsm / "main" / "test-00000-of-00001.parquet", _gsm(4, 1))
    repos = [
        repo_from_folder("allenai/ai2_arc", arc, repo_type="dataset"),
        repo_from_folder("openai/gsm8k", gsm, repo_type="dataset"),
    ]
    return {f"datasets/{r.repo_id}": r for r in repos}  # the loopback Hub's keys: datasets apart from models


def test_a_shipped_task_pinned_fetched_and_run_by_name(tmp_path: Path, datasets: dict[str, Any]) -> None:
    lab, home, cache = copy_lab(tmp_path), tmp_path / "home", tmp_path / "cache"
    shutil.rmtree(lab / "suites" / "lm-eval" / "gsm8k")  # the lab's own gsm8k would be the one used: the harness's here
    env = {"LABCTL_HOME": str(home), "LABCTL_CACHE_DIR": str(cache), "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}

    def labctl(*args: str, endpoint: str | None = None) -> Any:
        return run_labctl(*args, lab=lab, env={**env, **({"HF_ENDPOINT": endpoint} if endpoint else {})}, timeout=300)

    early = labctl("suites", "lm-eval:arc_easy", "--answer-map")
    assert early.code == 2 and "labctl fetch --task arc_easy" in early.stderr, early
    with loopback_hub(datasets) as hub:
        arc = labctl("fetch", "--task", "arc_easy", endpoint=hub.endpoint)
        gsm = labctl("fetch", "--task", "gsm8k", endpoint=hub.endpoint)
        assert arc.code == 0 and gsm.code == 0, (arc.stderr, gsm.stderr)
        assert hub.bytes_sent("allenai/ai2_arc") < sum(
            len(d) for d in datasets["datasets/allenai/ai2_arc"].files.values()
        )
        again = labctl("fetch", "--task", "arc_easy", "--json", endpoint=hub.endpoint)
        assert again.code == 0 and json.loads(again.stdout)["cached"] is True  # pinned now: the usual fetch
    commit = datasets["datasets/allenai/ai2_arc"].commit
    assert f"task set arc_easy: pinned allenai/ai2_arc@{commit}" in arc.stdout
    source = yaml.safe_load((lab / "suites" / "lm-eval" / "arc_easy" / "source.yaml").read_text())
    assert source["harness_task"] == "arc_easy" and source["harness_file"] == "arc/arc_easy.yaml"
    assert source["dataset"]["revision"] == commit and source["dataset"]["format"] == "parquet"
    assert source["dataset"]["files"] == {
        "test": "ARC-Easy/test-00000-of-00001.parquet",
        "train": "ARC-Easy/train-00000-of-00001.parquet",
        "validation": "ARC-Easy/validation-00000-of-00001.parquet",
    }
    gsm_source = yaml.safe_load((lab / "suites" / "lm-eval" / "gsm8k" / "source.yaml").read_text())
    assert gsm_source["dataset"]["files"]["test"] == "main/test-00000-of-00001.parquet"
    snapshot = cache / "hub" / "datasets--allenai--ai2_arc" / "snapshots" / commit
    assert not (snapshot / "ARC-Challenge").exists()

    mapped = labctl("suites", "lm-eval:arc_easy,gsm8k", "--answer-map")
    assert mapped.code == 0, mapped.stderr
    answers = tmp_path / "answers.json"
    answers.write_text(mapped.stdout)
    with harness("--ttft-ms", "1", "--tpot-ms", "0", "--answers", str(answers), model="harness-smoke") as (base, _):
        run = harness_run_record(lab, home, base)
        smoke = labctl("eval", "run", run, "--suite", "lm-eval:arc_easy,gsm8k", "--limit", "3", "--json")
        full = labctl("eval", "run", run, "--suite", "lm-eval:arc_easy,gsm8k", "--json")
    assert smoke.code == 0, smoke.stderr[-2000:]
    assert full.code == 0, full.stderr[-2000:]
    assert "smoke run" in smoke.stderr
    assert "%|" not in smoke.stderr + full.stderr and "fatal:" not in smoke.stderr  # no bars, no `git` unwatched
    a, b = json.loads(smoke.stdout), json.loads(full.stdout)
    assert a["smoke"] is True and a["settings"]["limit"] == 3 and "smoke --limit 3" in a["suite"]["full_version"]
    assert a["total"] == 6 and b["total"] == 10 and "smoke" not in b  # 3 + 3 documents, then 6 + 4
    assert b["score"] == 1.0, [c for c in b["cases"] if not c["passed"]]  # the right choice, by log-likelihood
    arc_facts = next(t for t in b["tasks"] if t["name"] == "arc_easy")
    assert arc_facts["output_type"] == "multiple_choice" and arc_facts["chat_template"] is False
    assert arc_facts["dataset"]["source"] == f"allenai/ai2_arc@{commit}" and arc_facts["metric"] == "acc"
    assert next(c for c in b["cases"] if c["id"] == "arc_easy/0")["output"].startswith("choice 0 ")

    refused = labctl("eval", "diff", a["eval_id"], b["eval_id"])
    assert refused.code == 2 and "a smoke run (--limit 3) vs a full run" in refused.stderr, refused


def test_shipped_task_refusals(tmp_path: Path, datasets: dict[str, Any]) -> None:
    lab, home = copy_lab(tmp_path), tmp_path / "home"
    env = {"LABCTL_HOME": str(home), "LABCTL_CACHE_DIR": str(tmp_path / "cache")}
    with loopback_hub(datasets) as hub:
        env["HF_ENDPOINT"] = hub.endpoint
        unknown = run_labctl("fetch", "--task", "arc_eazy", lab=lab, env=env, timeout=300)
        unsafe = run_labctl("fetch", "--task", "humaneval", lab=lab, env=env, timeout=300)
        absent = run_labctl("fetch", "--task", "hellaswag", lab=lab, env=env, timeout=300)  # not on this Hub
    assert unknown.code == 2 and "ships no task" in unknown.stderr and "arc_easy" in unknown.stderr, unknown
    assert unsafe.code == 2 and "outside any sandbox" in unsafe.stderr, unsafe
    assert absent.code == 2 and "does not exist on the Hub" in absent.stderr, absent
    for result in (unknown, unsafe, absent):
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (lab / "suites" / "lm-eval" / "humaneval").exists()
    assert not (lab / "suites" / "lm-eval" / "hellaswag").exists()
    own = run_labctl(
        "eval",
        "run",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--suite",
        "coding",
        "--limit",
        "2",
        lab=lab,
        env=env,
    )
    assert own.code == 2 and "--limit is for lm-eval task sets" in own.stderr, own
    zero = run_labctl(
        "eval",
        "run",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--suite",
        "lm-eval:coding-basic",
        "--limit",
        "0",
        lab=lab,
        env=env,
    )
    assert zero.code == 2 and "--limit" in zero.stderr, zero
