"""A study on the Slurm test cluster: each (cell, repeat) is one job, submitted together; with one GPU free on
each node, Slurm runs the two cells at once, one per node. The report gives the queue wait apart from the
GPU-hours."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from helpers.harness_proc import free_port
from helpers.support import REPO, run_labctl

from labctl.catalog.clusters_file import load_clusters
from labctl.host.slurm import commands as slurm
from labctl.run.backends.slurm import jobs as cr

pytestmark = pytest.mark.slurm
HOSTS = REPO / "build" / "slurm-lab" / "hosts.yaml"


def test_a_study_of_two_cells_across_the_two_nodes(tmp_path: Path) -> None:
    if not HOSTS.is_file():
        pytest.skip(f"SKIPPED LOUDLY: no Slurm test cluster ({HOSTS} is missing: run `make slurm-lab`)")
    cluster = next(iter(load_clusters(REPO).values()))
    held = []
    for node, gpus in (("n1", 3), ("n2", 1)):  # one GPU free on each node
        options = ["--no-requeue", f"--nodelist={node}", f"--gres=gpu:{gpus}", "--time=5", "--output=/dev/null"]
        held.append(slurm.submit(cluster, options, "#!/bin/sh\nexec sleep 600\n"))
    try:
        deadline = time.monotonic() + 30
        while not all(slurm.job_state(cluster, job).running for job in held):
            assert time.monotonic() < deadline, "the holding jobs did not run"
            time.sleep(0.5)
        study = {
            "study": "on-slurm",
            "model": {"id": "labctl/harness-synthetic", "revision": "v1", "quantization": "none"},
            "workloads": [{"name": "chat-sweep", "concurrency": [1, 2], "requests": 4}],
            "environment": "simulated",
            "allow_unpinned": True,
            "fetch": False,
            "timeout_s": 90,
            "profiles": [
                {
                    "engine": "harness",
                    "profile": "smoke",
                    "overrides": {"extra_args": [["--ttft-ms", "5"], ["--ttft-ms", "9"]]},
                }
            ],
            "hosts": [cluster.name],
        }
        path = tmp_path / "on-slurm.yaml"
        path.write_text(yaml.safe_dump(study, sort_keys=False))
        home = tmp_path / "home"
        env = {"LABCTL_HOME": str(home), "LABCTL_HOSTS": str(HOSTS)}
        planned = run_labctl("study", "plan", str(path), "--json", env=env)
        assert planned.code == 0, planned.stderr
        assert {c["placement"]["kind"] for c in json.loads(planned.stdout)["cells"]} == {"cluster"}
        ran = run_labctl("study", "run", str(path), "--port", str(free_port()), env=env, timeout=240)
        assert ran.code == 0, ran.stderr + ran.stdout
    finally:
        for job in held:
            slurm.cancel(cluster, job)
    found = [json.loads(p.read_text()) for p in (home / "studies" / "on-slurm" / "cells").glob("*.json")]
    assert sorted(c["state"] for c in found) == ["done", "done"], [c.get("failure") for c in found]
    assert sorted(c["node"] for c in found) == ["n1", "n2"]  # Slurm placed them, one on each node
    for cell in found:  # measured where the engine ran: the client on the SSH node n2, here beside n1
        benches = [json.loads(p.read_text()) for p in (home / "runs" / cell["run_id"] / "bench").glob("*.json")]
        assert len(benches) == 2 and all(b["status"] == "complete" for b in benches)  # the canary, the ladder
        ran_on = {(b.get("client") or {}).get("ran_on") for b in benches}
        assert ran_on == ({f"{cluster.name}/n2"} if cell["node"] == "n2" else {None}), ran_on
    runs = [json.loads((home / "runs" / c["run_id"] / "record.json").read_text()) for c in found]
    assert all(r["slurm"]["state"] == "CANCELLED" and r["status"] == "stopped" for r in runs)
    spans = [(r["slurm"]["submitted_at"], r["stopped_at"]) for r in runs]
    assert max(s for s, _ in spans) < min(e for _, e in spans)  # the two jobs overlapped: run in parallel
    assert all(c["times"]["queue_wait_s"] > 0 and c["times"]["cold_start_s"] > 0 for c in found)
    report = "\n".join(p.read_text() for p in (home / "studies" / "on-slurm").rglob("*.md"))
    assert "Slurm queue wait (not GPU-hours)" in report and "queue wait s" in report, report[-3000:]
    assert cr.leftovers(cluster).ended == []
