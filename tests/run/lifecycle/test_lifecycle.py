"""labctl up / down / status / logs on a real Docker Engine with the harness engine.

GPU exclusivity is exercised with harness profiles whose GPU ids are labels only (the harness uses
no GPU and this host has none): the exclusivity logic reads the same labels a GPU engine carries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import openai
import pytest
from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import (
    containers_of,
    labctl,
    record,
    remove_runs,
    up,
    write_profile,
)
from helpers.support import LABCTL, run_labctl

pytestmark = pytest.mark.docker


def registry_digest(repo: str, tag: str) -> str:
    request = urllib.request.Request(
        f"http://127.0.0.1:5000/v2/{repo}/manifests/{tag}",
        method="HEAD",
        headers={
            "Accept": "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
        },
    )
    with urllib.request.urlopen(request) as response:
        return str(response.headers["Docker-Content-Digest"])


def test_up_status_down_with_complete_record(lab: Path, home: Path) -> None:
    write_profile(lab, "t1", free_port())
    result = up(lab, home, "t1")
    assert result.code == 0, result.stderr
    info = json.loads(result.stdout)
    assert set(info) >= {"run_id", "engine", "profile", "base_url", "model", "gpus", "health", "owner", "record"}
    assert info["health"] == "healthy" and info["base_url"].endswith("/v1")
    reply = openai.OpenAI(base_url=info["base_url"], api_key="x").chat.completions.create(
        model=info["model"], messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert reply.choices[0].message.content
    rec = record(home, info["run_id"])
    assert rec["status"] == "running" and rec["environment_label"] == "harness-check"
    # the harness simulates an engine on the CPU: its numbers are no accelerator's, and the record says so
    assert rec["accelerator"] == "simulated" and info["accelerator"] == "simulated"
    assert rec["image"]["digest"] == registry_digest("labctl/harness", "dev")
    assert rec["image"]["image_id"].startswith("sha256:")
    assert rec["container"]["command_line"][:3] == ["python3", "-m", "labctl.harness"]
    assert rec["compose"]["command"][:2] == ["docker", "compose"]
    for key in ("compose_up_s", "port_open_s", "ready_s", "first_completion_s", "cold_start_s"):
        assert rec["timings"][key] > 0
    assert rec["timings"]["ready_s"] >= 0.2  # the harness kept its port closed for its 0.2 s cold start
    own = rec["timings"]["labctl_s"]  # labctl's own time by part, beside the engine's
    assert {"plan", "docker checks", "gpu checks", "claims", "render", "after ready"} <= set(own), own
    assert all(v >= 0 for v in own.values()) and sum(own.values()) < rec["timings"]["total_s"], rec["timings"]
    assert rec["timings"]["poll_gap_s"] >= 0  # how late at most labctl noticed the engine's readiness
    shown = labctl(lab, home, "show", info["run_id"]).stdout
    assert "labctl's own time" in shown and "after ready" in shown, shown
    assert (home / "runs" / info["run_id"] / "compose.yaml").read_text().startswith("# Rendered by labctl")
    status = json.loads(labctl(lab, home, "status", "--json").stdout)
    mine = [s for s in status if s["run_id"] == info["run_id"]]
    assert mine and mine[0]["health"] == "healthy" and mine[0]["owner"] == rec["owner"]
    down = labctl(lab, home, "down", info["run_id"])
    assert down.code == 0, down.stderr
    assert containers_of(info["run_id"]) == []
    rec = record(home, info["run_id"])
    assert rec["status"] == "stopped" and rec["stopped_at"] and rec["stopped_by"]
    assert "serving harness-test" in labctl(lab, home, "logs", info["run_id"]).stdout  # saved before removal
    assert [
        e["event"] for e in map(json.loads, (home / "runs" / info["run_id"] / "events.jsonl").read_text().splitlines())
    ] == ["up", "ready", "down"]


def test_two_concurrent_ups_on_one_port_exactly_one_wins(lab: Path, home: Path) -> None:
    # The GPU version runs on the simulated GPU lab (tests/run/lifecycle/test_sim_profiles.py): the harness holds no GPU.
    port = free_port()
    write_profile(lab, "c1", port)
    write_profile(lab, "c2", port)
    env = {**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)}
    procs = [
        subprocess.Popen(
            [*LABCTL, "up", "harness", "--profile", p, "--allow-unpinned", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in ("c1", "c2")
    ]
    codes = sorted(p.wait(60) for p in procs)
    assert codes == [0, 3], [p.stderr.read() for p in procs]  # type: ignore[union-attr]


def test_port_held_by_another_run(lab: Path, home: Path) -> None:
    port = free_port()
    write_profile(lab, "p1", port)
    write_profile(lab, "p2", port)
    assert up(lab, home, "p1").code == 0
    second = up(lab, home, "p2")
    assert second.code == 3 and f"port {port} is held by harness/p1" in second.stderr


def test_crash_on_start_fails_fast_with_logs(lab: Path, home: Path) -> None:
    write_profile(lab, "crash", free_port(), extra=["--fail-on-start"])
    start = time.monotonic()
    result = up(lab, home, "crash", "--timeout", "120")
    elapsed = time.monotonic() - start
    assert result.code == 1
    assert "exit code 3" in result.stderr
    # the cause, quoted from above the last log lines, which are the harness's shutdown chatter
    cause = "before it was ready: ValueError: the harness engine refuses to start (--fail-on-start)."
    assert cause in result.stderr and "shutting down worker 29" in result.stderr, result.stderr
    # Noticed by the container's state, not by running out the readiness timeout (a loaded CI host can
    # take seconds to start a container, so the bound is the timeout, not a stopwatch figure).
    assert elapsed < 60, f"crash detected after {elapsed:.1f} s of a 120 s readiness timeout"
    run_id = next((home / "runs").iterdir()).name
    rec = record(home, run_id)
    assert rec["status"] == "failed" and "exit code 3" in rec["reason"] and cause in rec["reason"]
    assert containers_of(run_id) == []
    assert "failing during start-up" in (home / "runs" / run_id / "serve.log").read_text()


def test_never_ready_times_out_with_logs(lab: Path, home: Path) -> None:
    write_profile(lab, "never", free_port(), extra=["--never-ready"])
    result = up(lab, home, "never", "--timeout", "2")
    assert result.code == 1
    assert "not ready after 2 s (last probe: 503)" in result.stderr and "serving harness-test" in result.stderr
    run_id = next((home / "runs").iterdir()).name
    assert record(home, run_id)["status"] == "failed" and containers_of(run_id) == []


def test_ctrl_c_leaves_nothing_and_an_aborted_record(lab: Path, home: Path) -> None:
    write_profile(lab, "slow", free_port(), extra=["--cold-start", "30"])
    env = {**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)}
    proc = subprocess.Popen(
        [*LABCTL, "up", "harness", "--profile", "slow", "--allow-unpinned"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Started as `labctl up &` from a script (a shell without job control) starts it: SIGINT ignored.
        # labctl must take it back, or the Ctrl-C below is lost and the engine is left starting.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    deadline = time.monotonic() + 30
    while not (
        (home / "runs").is_dir()
        and any((home / "runs").iterdir())
        and containers_of(next((home / "runs").iterdir()).name)
    ):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 130
    run_id = next((home / "runs").iterdir()).name
    assert containers_of(run_id) == []
    rec = record(home, run_id)
    assert rec["status"] == "aborted" and "Ctrl-C" in rec["reason"]


def test_record_stays_valid_json_under_sigkill(lab: Path, home: Path) -> None:
    write_profile(lab, "k", free_port())
    env = {**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)}
    for delay in (0.6, 0.9, 1.2, 1.5):
        proc = subprocess.Popen(
            [*LABCTL, "up", "harness", "--profile", "k", "--allow-unpinned"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        proc.kill()
        proc.wait()
        for path in (home / "runs").glob("*/record.json"):
            json.loads(path.read_text())  # never half-written
        remove_runs(home)


def test_gpu_engine_refused_by_preflight_with_nothing_started(lab: Path, home: Path) -> None:
    if Path("/usr/bin/nvidia-smi").exists():
        pytest.skip("this host has NVIDIA GPUs: the refusal is for GPU-less hosts")
    # other tiers share this daemon: only a container of this home would be this command's
    ours = ["docker", "ps", "-aq", "--filter", f"label=labctl.home={home}"]
    result = labctl(lab, home, "up", "vllm", "--profile", "qwen3-32b", "--allow-unpinned")
    assert result.code == 1
    assert result.stderr.startswith("Error: cannot start vllm/qwen3-32b on this host: Docker has no NVIDIA runtime")
    assert "nvidia-smi was not found" in result.stderr and "Nothing was started." in result.stderr
    assert subprocess.run(ours, capture_output=True, text=True, check=True).stdout == ""
    assert not (home / "runs").exists()


def test_pin_writes_registry_digest_keeping_comments(lab: Path, home: Path) -> None:
    path = lab / "engines" / "harness" / "profiles" / "smoke.yaml"
    path.write_text(
        "# reviewed by the lab\n" + path.read_text().replace("max_num_seqs: 256", "max_num_seqs: 256  # keep")
    )
    result = labctl(lab, home, "pin", "harness", "--profile", "smoke")
    assert result.code == 0, result.stderr
    digest = registry_digest("labctl/harness", "dev")
    text = path.read_text()
    assert f"image: 127.0.0.1:5000/labctl/harness:dev@{digest}\n" in text
    assert "unpinned" not in text and text.startswith("# reviewed by the lab\ndescription:")
    assert "max_num_seqs: 256  # keep\n" in text
    assert labctl(lab, home, "validate", "harness", "--profile", "smoke").code == 0


def test_pinned_profile_is_pulled_by_digest_when_absent(lab: Path, home: Path) -> None:
    assert labctl(lab, home, "pin", "harness", "--profile", "smoke").code == 0
    path = lab / "engines" / "harness" / "profiles" / "smoke.yaml"
    path.write_text(path.read_text().replace("port: 18000", f"port: {free_port()}"))
    digest = registry_digest("labctl/harness", "dev")
    subprocess.run(["docker", "rmi", "-f", "127.0.0.1:5000/labctl/harness:dev"], capture_output=True, check=True)
    try:
        result = run_labctl("up", "harness", "--profile", "smoke", "--json", lab=lab, env={"LABCTL_HOME": str(home)})
        assert result.code == 0, result.stderr  # pinned: no --allow-unpinned needed
        rec = record(home, json.loads(result.stdout)["run_id"])
        assert rec["image"]["pulled"] is True and rec["image"]["digest"] == digest
        assert rec["timings"]["image_pull_s"] > 0
        assert f"127.0.0.1:5000/labctl/harness@{digest}" in rec["image"]["repo_digests"]
    finally:
        subprocess.run(
            ["docker", "tag", f"127.0.0.1:5000/labctl/harness@{digest}", "127.0.0.1:5000/labctl/harness:dev"],
            capture_output=True,
        )


def test_logs_tail_since_and_a_stopped_runs_saved_log(lab: Path, home: Path) -> None:
    write_profile(lab, "tl", free_port())
    info = json.loads(up(lab, home, "tl").stdout)
    run_id = info["run_id"]
    whole = labctl(lab, home, "logs", run_id).stdout.splitlines()
    assert len(whole) >= 2, whole
    # a part of the id, as people type it, beside the command's own --host (read after the id was made whole)
    last = labctl(lab, home, "logs", run_id[-6:], "--tail", "1", "--host", "local")
    assert last.code == 0 and last.stdout.splitlines() == whole[-1:], last
    assert labctl(lab, home, "logs", run_id, "--since", "10m").stdout.splitlines() == whole
    assert labctl(lab, home, "logs", run_id, "--since", "2099-01-01").stdout == ""
    assert labctl(lab, home, "down", run_id).code == 0
    saved = labctl(lab, home, "logs", run_id, "--tail", "1")
    assert saved.code == 0 and saved.stdout.splitlines() == whole[-1:], saved
    live_only = labctl(lab, home, "logs", run_id, "--since", "1h")
    assert live_only.code == 2 and "--since and --follow apply only to a live engine" in live_only.stderr
    bad = labctl(lab, home, "logs", run_id, "--tail", "0")
    assert bad.code == 2 and "--tail 0" in bad.stderr
