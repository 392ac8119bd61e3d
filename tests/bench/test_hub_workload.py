"""A workload whose dataset is a Hub dataset file: bench refuses it until `labctl fetch --workload` put it in
the Hub cache (through the loopback Hub, resumably, noted in the ledger), `labctl pin --workload` writes the
commit its branch names, and bench reads it offline, sampling as vLLM does, no prompt twice, the facts
recorded; a bench asking for more prompts than the dataset holds is refused before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.harness_proc import free_port, harness
from helpers.loopback_hub import HubRepo, blob_id, loopback_hub
from helpers.records import copy_lab
from helpers.support import run_labctl

pytestmark = pytest.mark.process

REPO_ID = "labctl-test/sharegpt-mini"
FILE = "sg_mini.json"


def sharegpt_bytes() -> bytes:
    """A ShareGPT-shaped file: 30 conversations vLLM's rule keeps, and some it drops."""
    items: list[dict[str, Any]] = []
    for i in range(30):
        prompt = " ".join([f"q{i}"] + ["word"] * (5 + i % 6))
        answer = " ".join(["ans"] * (4 + i % 5))
        items.append(
            {"id": f"c{i}", "conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}]}
        )
    items.append(
        {"id": "short", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "a b c d"}]}
    )
    items.append({"id": "alone", "conversations": [{"from": "human", "value": "one turn only here"}]})
    return json.dumps(items).encode()


def test_fetch_pin_and_bench_a_hub_dataset_offline(tmp_path: Path) -> None:
    lab, home, cache = copy_lab(tmp_path), tmp_path / "home", tmp_path / "cache"
    workload = {
        "description": "ShareGPT-shaped file from the loopback Hub",
        "dataset": {"kind": "sharegpt", "repo": REPO_ID, "revision": "main", "file": FILE},
        "requests": 3,
        "concurrency": [1, 2],
        "warmup_per_concurrency": 1,
    }
    (lab / "workloads" / "sg-hub.yaml").write_text("# the Hub's copy\n" + yaml.safe_dump(workload, sort_keys=False))
    data = sharegpt_bytes()
    dataset = HubRepo(REPO_ID, {FILE: data, "other.json": b"[]"}, repo_type="dataset")
    dataset.branches["main"] = dataset.commit
    offline = {
        "LABCTL_HOME": str(home),
        "LABCTL_CACHE_DIR": str(cache),
        "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}",
    }

    def labctl(*args: str, env: dict[str, str] | None = None) -> Any:
        return run_labctl(*args, lab=lab, env={**offline, **(env or {})}, timeout=180)

    def bench(*args: str) -> Any:
        return labctl("bench", "run", "--base-url", f"{base}/v1", "--model", "m", "--workload", "sg-hub", *args)

    with harness("--ttft-ms", "1", "--tpot-ms", "0", model="m") as (base, _):
        early = bench("--json")
        assert early.code == 2 and "`labctl fetch --workload sg-hub` first" in early.stderr, early.stderr
        assert len(early.stderr.strip().splitlines()) == 1
        folder = cache / "hub" / "datasets--labctl-test--sharegpt-mini"
        (folder / "blobs").mkdir(parents=True)
        (folder / "blobs" / f"{blob_id(data)}.incomplete").write_bytes(data[:100])  # an interrupted fetch
        with loopback_hub({}) as hub:
            hub.add(dataset)
            online = {"HF_ENDPOINT": hub.endpoint}
            fetched = labctl("fetch", "--workload", "sg-hub", env=online)
            assert fetched.code == 0, fetched.stderr
            assert "resuming" in fetched.stderr and f"commit {dataset.commit}" in fetched.stdout
            assert hub.bytes_sent(REPO_ID) == len(data) - 100  # only the named file, only its rest
            pinned = labctl("pin", "--workload", "sg-hub", env=online)
            assert pinned.code == 0, pinned.stderr
        assert (folder / "snapshots" / dataset.commit / FILE).read_bytes() == data
        assert not (folder / "snapshots" / dataset.commit / "other.json").exists()
        text = (lab / "workloads" / "sg-hub.yaml").read_text()
        assert text.startswith("# the Hub's copy\n") and f"revision: {dataset.commit}" in text
        ledger = [json.loads(line) for line in (home / ".state" / "acquired.jsonl").read_text().splitlines()]
        assert any(e.get("name") == f"{REPO_ID}@{dataset.commit}" for e in ledger)

        done = bench("--repeat", "2", "--json")  # offline: HF_ENDPOINT leads nowhere
        assert done.code == 0, done.stderr
        result = json.loads(done.stdout)
        facts = result["workload"]
        assert facts["dataset"] == {
            "repo": REPO_ID,
            "revision": dataset.commit,
            "commit": dataset.commit,
            "file": FILE,
            "bytes": len(data),
        }
        prompts = facts["prompts"]
        assert prompts["sent"] == prompts["distinct"] == (1 + 3 + 2 + 3) * 2 and prompts["available"] == 30
        assert prompts["seed"] == 0 and "vLLM" in prompts["rule"] and prompts["repeat_prompts"] is False
        assert "prompts: 18 to send, 18 distinct of the 30 the dataset holds; seed 0" in done.stderr
        shown = labctl("bench", "show", result["bench_id"])
        assert shown.code == 0, shown.stderr
        assert f"dataset: {REPO_ID}@{dataset.commit} (commit {dataset.commit}), {FILE}" in shown.stdout
        assert "prompts: 18 sent, 18 distinct of the 30 the dataset holds; seed 0" in shown.stdout

        results_before = sorted((home / "runs").rglob("*.json"))
        too_many = bench("--requests", "20", "--json")
        assert too_many.code == 2, too_many.stderr
        assert "sends 43 prompts but its dataset holds 30 distinct" in too_many.stderr
        assert len(too_many.stderr.strip().splitlines()) == 1
        assert sorted((home / "runs").rglob("*.json")) == results_before  # refused before anything was written
