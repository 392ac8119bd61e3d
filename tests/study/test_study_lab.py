"""Studies on the simulated GPU lab (build/sim-lab: two simulated hosts, each a Docker daemon of its own) with
labctl's harness engine: two hosts in parallel, two 1-GPU cells side by side on one host (the vLLM persona), a cell whose engine crashes mid-ladder while the others finish,
Ctrl-C and resume with no finished cell redone, a changed image digest detected on resume, and the report of an
interrupted study. The GPUs are simulated; Docker, the engine's HTTP API, the bench client and the records are real."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers.flaky_registry import flaky_registry
from helpers.harness_proc import free_port
from helpers.loopback_hub import loopback_hub
from helpers.sim_lab import require_sim_lab
from helpers.support import IN_CI, LABCTL, REPO, run_labctl

pytestmark = [pytest.mark.docker, pytest.mark.lab]  # the simulated GPU lab: one test at a time

SIM = REPO / "build" / "sim-lab"
SOCKETS = {"sim-h100": "/var/run/labctl-sim/docker.sock", "sim-gb10": "/var/run/labctl-sim/gb10/docker.sock"}
IMAGE = "127.0.0.1:5000/labctl/harness:dev"


def sim_docker(host: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DOCKER_HOST": f"unix://{SOCKETS[host]}"}
    return subprocess.run(["docker", *args], capture_output=True, text=True, env=env, input=stdin, timeout=300)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    require_sim_lab()
    root = tmp_path_factory.mktemp("study-lab")
    lab = root / "sim-lab"
    shutil.copytree(SIM, lab, ignore=shutil.ignore_patterns("runs", ".state", "studies"))
    yield lab
    for host in SOCKETS:  # nothing these tests started may outlive them
        ids = sim_docker(host, "ps", "-aq", "--filter", "label=labctl.run_id").stdout.split()
        for container in ids:
            where = sim_docker(
                host, "inspect", "-f", '{{index .Config.Labels "com.docker.compose.project.working_dir"}}', container
            ).stdout
            if str(root) in where:
                sim_docker(host, "rm", "-f", container)


def ours_running(root: Path) -> list[str]:
    """Containers of this test's homes still on either simulated host."""
    left = []
    for host in SOCKETS:
        for container in sim_docker(host, "ps", "-q", "--filter", "label=labctl.run_id").stdout.split():
            where = sim_docker(
                host, "inspect", "-f", '{{index .Config.Labels "com.docker.compose.project.working_dir"}}', container
            ).stdout
            if str(root) in where:
                left.append(f"{host}:{container}")
    return left


def study_file(folder: Path, name: str, profiles: list[dict], hosts: list[str], image: str | None = None) -> Path:
    data = {
        "study": name,
        "model": {"id": "labctl/harness-synthetic", "revision": "v1", "quantization": "none"},
        "workloads": [{"name": "chat-sweep", "concurrency": [1, 4, 8], "requests": 4}],
        "slo": {"ttft_ms": 500},
        "environment": "simulated",
        "allow_unpinned": True,
        "fetch": False,
        "timeout_s": 60,
        "profiles": profiles,
        "hosts": hosts,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def labctl(lab: Path, home: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    result = run_labctl(*args, lab=lab, env={"LABCTL_HOME": str(home)}, timeout=timeout)
    return subprocess.CompletedProcess(args, result.code, result.stdout, result.stderr)


def cells(home: Path, name: str) -> dict[tuple[str, int], dict]:
    found = {}
    for path in (home / "studies" / name / "cells").glob("*.json"):
        data = json.loads(path.read_text())
        found[(data["cell"], data["repeat"])] = data
    return found


def when(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def fresh_tag(sim: Path) -> Iterator[str]:
    """A tag of the harness image in the lab registry that neither simulated host holds: the study pulls it."""
    tag = f"{IMAGE.rsplit(':', 1)[0]}:study27-prefetch"
    for command in (["tag", IMAGE, tag], ["push", "-q", tag]):
        done = subprocess.run(["docker", *command], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    for host in SOCKETS:
        sim_docker(host, "rmi", "-f", tag)
    yield tag
    for host in SOCKETS:
        sim_docker(host, "rmi", "-f", tag)
    subprocess.run(["docker", "rmi", tag], capture_output=True, timeout=60)  # the tag only: harness:dev stays


def test_two_hosts_in_parallel_and_a_crash_that_stops_only_its_cell(sim: Path, fresh_tag: str) -> None:
    home = sim.parent / "home-crash"
    port = free_port()
    profile = yaml.safe_load((sim / "engines/harness/profiles/smoke.yaml").read_text())
    profile["image"] = fresh_tag
    (sim / "engines/harness/profiles/study-prefetch.yaml").write_text(yaml.safe_dump(profile))
    crash = ["--crash-after", "16"]  # readiness 1 + canary 6 + c=1 6: the engine dies in the c=4 level
    path = study_file(
        sim.parent,
        "two-hosts",
        [{"engine": "harness", "profile": "study-prefetch", "overrides": {"extra_args": [[], crash]}}],
        ["sim-h100", "sim-gb10"],
    )
    ran = labctl(sim, home, "study", "run", str(path), "--port", str(port))
    assert ran.returncode == 0, ran.stderr
    for host in SOCKETS:  # each host pulled its image before it measured, once; every up found it there
        pulled = json.loads((home / "studies" / "two-hosts" / "prefetch" / f"{host}.json").read_text())
        assert [(p["what"], p.get("error")) for p in pulled] == [(f"pull {fresh_tag}", None)]
    found = cells(home, "two-hosts")
    assert len(found) == 4
    crashed = {k: v for k, v in found.items() if "crash-after" in k[0]}
    fine = {k: v for k, v in found.items() if "crash-after" not in k[0]}
    assert {v["state"] for v in fine.values()} == {"done"}, {k: v.get("failure") for k, v in fine.items()}
    for data in crashed.values():
        assert data["state"] == "failed" and data["failure"]["class"] == "crash", data["failure"]
        assert data["censored"] == {"chat-sweep": [4, 8]}  # the crash level and every higher one
        assert Path(data["failure"]["logs"]).is_file()
        assert "crashing at request" in Path(data["failure"]["logs"]).read_text()
    # the two hosts worked at the same time: a cell on each overlapped
    h100 = [v for k, v in found.items() if k[0].endswith("@sim-h100")]
    gb10 = [v for k, v in found.items() if k[0].endswith("@sim-gb10")]
    spans = [
        (when(a["started_at"]), when(a["finished_at"]), when(b["started_at"]), when(b["finished_at"]))
        for a in h100
        for b in gb10
    ]
    assert any(s1 < e2 and s2 < e1 for s1, e1, s2, e2 in spans)
    # every record belongs to the study and names its cell; no up pulled (the prefetch had)
    for data in found.values():
        record = json.loads((home / "runs" / data["run_id"] / "record.json").read_text())
        assert record["prep"]["image_pull"]["cached"] is True
        result = json.loads(next((home / "runs" / data["run_id"] / "bench").glob("b*[0-9a-f].json")).read_text())
        assert result["study"]["study"] == "two-hosts" and result["study"]["cell"] == data["cell"]
        assert result["target"]["gpus"] == (len(record["gpus"]["ids"]) or None)  # what per-GPU figures divide by
    report = (home / "studies" / "two-hosts" / "report" / "report.md").read_text()
    assert "crash: the engine exited at c=4" in report and "chat-sweep c≥4" in report
    assert (home / "studies" / "two-hosts" / "report" / ".labctl-report").is_file()
    assert ours_running(sim.parent) == []
    status = labctl(sim, home, "study", "status", "two-hosts", "--json")
    summary = json.loads(status.stdout)
    assert summary["finished"] == 4 and summary["total"] == 4 and summary["eta_s"] == 0.0


def test_interrupt_then_resume_redoes_nothing_finished_and_sees_a_new_image(sim: Path) -> None:
    home = sim.parent / "home-resume"
    port = free_port()
    tag = "labctl/harness:study27-resume"  # this test's own tag on sim-h100, moved to a new image below
    assert sim_docker("sim-h100", "pull", IMAGE).returncode == 0
    assert sim_docker("sim-h100", "tag", IMAGE, tag).returncode == 0
    profile = yaml.safe_load((sim / "engines/harness/profiles/smoke.yaml").read_text())
    profile["image"] = tag
    (sim / "engines/harness/profiles/study-resume.yaml").write_text(yaml.safe_dump(profile))
    path = study_file(
        sim.parent,
        "resume",
        [
            {
                "engine": "harness",
                "profile": "study-resume",
                "overrides": {"extra_args": [["--ttft-ms", "20"], ["--ttft-ms", "30"]]},
            }
        ],
        ["sim-h100"],
    )
    try:
        env = {**os.environ, "LABCTL_HOME": str(home), "LABCTL_LAB": str(sim)}
        proc = subprocess.Popen(
            [*LABCTL, "study", "run", str(path), "--port", str(port)],
            env=env,
            cwd=sim,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the first cell finished and the second one's engine is measured
            states = cells(home, "resume")
            if any(v["state"] == "done" for v in states.values()) and any(
                v["state"] == "running" and v.get("run_id") for v in states.values()
            ):
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        first = cells(home, "resume")
        done = {k: v for k, v in first.items() if v["state"] == "done"}
        cut = {k: v for k, v in first.items() if v["state"] == "interrupted"}
        assert len(done) == 1 and len(cut) == 1, first
        assert next(iter(cut.values()))["failure"]["class"] == "interrupted"
        assert ours_running(sim.parent) == []  # Ctrl-C left nothing running
        report = (home / "studies" / "resume" / "report" / "report.md").read_text()
        assert "| interrupted |" in report and "| done |" in report  # the report of what it measured
        assert (home / "studies" / "resume" / "report" / "chat-sweep" / "pareto.png").is_file()

        again = labctl(sim, home, "study", "run", str(path), "--port", str(port))
        assert again.returncode == 0, again.stderr
        assert "1 measured, 1 reused, 0 failed" in again.stdout
        second = cells(home, "resume")
        for key, data in done.items():  # the finished cell was not redone
            assert second[key]["run_id"] == data["run_id"] and second[key]["finished_at"] == data["finished_at"]
        assert {v["state"] for v in second.values()} == {"done"}

        # a new image behind the same tag: the plan names the field, and the run measures both cells again
        build = sim_docker("sim-h100", "build", "-q", "-t", tag, "-", stdin=f"FROM {IMAGE}\nLABEL study27=changed\n")
        assert build.returncode == 0, build.stderr
        planned = labctl(sim, home, "study", "plan", str(path), "--port", str(port))
        assert planned.stdout.count("r1 redo: image changed") == 2, planned.stdout
        third = labctl(sim, home, "study", "run", str(path), "--port", str(port))
        assert "2 measured, 0 reused" in third.stdout, third.stderr
        redone = cells(home, "resume")
        assert all(redone[k]["run_id"] != second[k]["run_id"] for k in second)
        assert all(v["redone_because"] == ["image"] for v in redone.values())
    finally:
        sim_docker("sim-h100", "rmi", "-f", tag)


def test_a_gpu_study_on_simulated_hosts_is_a_finding_of_plan_and_a_refusal_of_run(sim: Path) -> None:
    home = sim.parent / "home-gpu"
    study = REPO / "studies" / "h100-qwen3-32b.yaml"
    planned = run_labctl("--host", "sim-h100", "study", "plan", str(study), lab=sim, env={"LABCTL_HOME": str(home)})
    assert planned.code == 2, planned.stderr  # printed whole, then the exit `study run` would give
    assert "finding (run refuses): environment: the study expects gpu" in planned.stderr
    assert "long-context c=60,120,180,240,300,360,420,480,540,600 KV-bound (its KV cache holds about" in planned.stderr
    assert "long-context 60*,120*,180*,240*,300*,360*,420*,480*,540*,600*" in planned.stdout  # kept, marked
    assert "sharegpt 60,120,180,240,300,360,420,480,540,600,1200" in planned.stdout
    for flag in ("--max-num-seqs", "--max-running-requests", "--max_batch_size"):  # every cap raised to the top
        assert f": 1200 ({flag} 1200, set on the cell's command line)" in planned.stdout, flag
    assert "above the batch cap" not in planned.stderr
    assert "prompts sharegpt: Hub dataset anon8231489123/ShareGPT_Vicuna_unfiltered@main" in planned.stdout
    assert "run `labctl fetch --workload sharegpt`" in planned.stderr  # a finding of plan, a refusal of run
    assert "run `labctl pin --workload sharegpt`" in planned.stderr
    ran = run_labctl("--host", "sim-h100", "study", "run", str(study), lab=sim, env={"LABCTL_HOME": str(home)})
    assert ran.code == 2 and "the study cannot run here: environment" in ran.stderr.splitlines()[-1]
    assert not (home / "runs").exists() and not (home / "studies").exists()


def test_the_spark_plan_names_the_levels_above_atlas_cap_and_shows_the_raised_ones(sim: Path) -> None:
    study = REPO / "studies" / "spark-four-engines.yaml"
    home = {"LABCTL_HOME": str(sim.parent / "home-spark")}
    planned = run_labctl("--host", "sim-gb10", "study", "plan", str(study), lab=sim, env=home)
    assert planned.code == 2 and "finding (run refuses): environment" in planned.stderr, planned.stderr
    assert (
        "atlas.qwen3.6-35b-a3b-fp8+args[--enable-prefix-caching]@sim-gb10: sharegpt c=16,32,64 above the batch cap "
        "of 8 (--max-batch-size 8 (sequences per decode step), its default: Atlas' crates/spark-server/src/cli/"
        "serve_args.rs @00caf3af): up to 56 requests queue"
    ) in planned.stderr
    for engine, flag, dtype in (("vllm", "--max-num-seqs", "fp8"), ("sglang", "--max-running-requests", "fp8_e4m3")):
        cell = f"{engine}.qwen3.6-35b-a3b-fp8+args[--kv-cache-dtype,{dtype}]+max_num_seqs=64@sim-gb10"
        assert f"batch cap {cell}: 64 ({flag} 64, set on the cell's" in planned.stdout
    assert "batch caps kept: Atlas decodes at most 8 sequences a step" in planned.stdout
    # the same-rules settings are made equal by the study: compare will not refuse its table
    assert "setting prefix caching differs" not in planned.stderr
    assert "setting KV-cache dtype differs" not in planned.stderr
    assert "setting batch cap differs" in planned.stderr  # said, not a same-rules field


def test_a_host_over_ssh_and_a_simulated_one_in_parallel(sim: Path) -> None:
    registered = REPO / "build" / "remote-lab" / "hosts.yaml"
    if not Path("/var/run/labctl-labb/docker.sock").is_socket() or not registered.is_file():
        reason = "the remote lab is not up (make remote-lab)"
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(f"SKIPPED LOUDLY: {reason}")
    (sim / "build" / "remote-lab").mkdir(parents=True, exist_ok=True)
    shutil.copy(registered, sim / "build" / "remote-lab" / "hosts.yaml")
    home = sim.parent / "home-labb"
    path = study_file(sim.parent, "over-ssh", [{"engine": "harness", "profile": "smoke"}], ["labb", "sim-h100"])
    ran = labctl(sim, home, "study", "run", str(path), "--port", str(free_port()))
    assert ran.returncode == 0, ran.stderr
    found = cells(home, "over-ssh")
    assert {k[0]: v["state"] for k, v in found.items()} == {
        "harness.smoke@labb": "done",
        "harness.smoke@sim-h100": "done",
    }
    labb = found[("harness.smoke@labb", 1)]
    record = json.loads((home / "runs" / labb["run_id"] / "record.json").read_text())
    assert record["host_entry"] == "labb" and record["status"] == "stopped"
    left = subprocess.run(
        [
            "docker",
            "-H",
            "ssh://labctl-remote@10.201.0.2",
            "ps",
            "-q",
            "--filter",
            f"label=labctl.run_id={labb['run_id']}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert left.returncode == 0 and left.stdout.strip() == ""


def test_two_one_gpu_cells_on_one_host_run_side_by_side_on_distinct_gpus(sim: Path) -> None:
    """Two `count: 1` cells on sim-h100 (two simulated H100s): both start at once, the claims place them on
    GPU 0 and GPU 1, and each listens on a port of its own."""
    home = sim.parent / "home-lanes"
    port = free_port()
    profile = yaml.safe_load((sim / "engines/vllm/profiles/qwen2.5-7b.yaml").read_text())
    profile["gpus"] = {"count": 1}
    (sim / "engines/vllm/profiles/study-lanes.yaml").write_text(yaml.safe_dump(profile))
    path = study_file(
        sim.parent,
        "lanes",
        [{"engine": "vllm", "profile": "study-lanes", "overrides": {"max_num_seqs": [64, 128]}}],
        ["sim-h100"],
    )
    data = yaml.safe_load(path.read_text())
    data["model"] = {"id": "Qwen/Qwen2.5-7B-Instruct", "revision": "main", "quantization": "bf16"}
    data["workloads"] = [{"name": "chat-sweep", "concurrency": [1, 2], "requests": 4}]
    data["fetch"] = True
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with loopback_hub() as hub:
        env = {
            "LABCTL_HOME": str(home),
            "HF_ENDPOINT": hub.endpoint,
            "LABCTL_CACHE_DIR": str(sim.parent / "hf-lanes"),
        }
        ran = run_labctl("study", "run", str(path), "--port", str(port), lab=sim, env=env, timeout=240)
    assert ran.code == 0, ran.stderr
    found = cells(home, "lanes")
    assert len(found) == 2 and {v["state"] for v in found.values()} == {"done"}, found
    first, second = found.values()
    assert {tuple(first["gpu_ids"]), tuple(second["gpu_ids"])} == {("0",), ("1",)}
    assert {first["port"], second["port"]} == {port, port + 1}
    spans = [(when(v["started_at"]), when(v["finished_at"])) for v in (first, second)]
    assert spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1]  # up to down, they overlapped
    for data in found.values():
        record = json.loads((home / "runs" / data["run_id"] / "record.json").read_text())
        assert record["gpus"]["ids"] == data["gpu_ids"] and record["status"] == "stopped"
    assert ours_running(sim.parent) == []


def test_a_pull_that_fails_twice_is_retried_once_by_the_cell(sim: Path) -> None:
    """The registry answers 503 to the first two pulls (the prefetch's, then the cell's `up`): the cell names the
    pull flake, tries once more, and finishes; a third failure would have been the cell's."""
    home = sim.parent / "home-flake"
    with flaky_registry(failing=2) as front:
        image = f"127.0.0.1:{front.server_address[1]}/labctl/harness:dev"  # a name neither host holds
        profile = yaml.safe_load((sim / "engines/harness/profiles/smoke.yaml").read_text())
        profile["image"] = image
        (sim / "engines/harness/profiles/study-flake.yaml").write_text(yaml.safe_dump(profile))
        path = study_file(sim.parent, "flake", [{"engine": "harness", "profile": "study-flake"}], ["sim-h100"])
        try:
            ran = labctl(sim, home, "study", "run", str(path), "--port", str(free_port()))
        finally:
            sim_docker("sim-h100", "rmi", "-f", image)
    assert ran.returncode == 0, ran.stderr
    assert front.pulls == 3 and front.failed >= 2, front.seen
    pulled = json.loads((home / "studies" / "flake" / "prefetch" / "sim-h100.json").read_text())
    assert [p["what"] for p in pulled] == [f"pull {image}"] and "503" in pulled[0]["error"], pulled
    (cell,) = cells(home, "flake").values()
    assert cell["state"] == "done", cell.get("failure")
    retried = [c for c in cell["caveats"] if c.startswith("retried once after: ")]
    assert len(retried) == 1 and "503 Service Unavailable" in retried[0], cell["caveats"]
    record = json.loads((home / "runs" / cell["run_id"] / "record.json").read_text())
    assert record["prep"]["image_pull"]["cached"] is False  # the retry pulled it
    assert ours_running(sim.parent) == []


def _until_a_cell_measures(home: Path, name: str, proc: subprocess.Popen[str], hosts: int = 1) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # an engine is up and being measured on every host
        measuring = {v["host"] for v in cells(home, name).values() if v["state"] == "running" and v.get("run_id")}
        if len(measuring) >= hosts:
            return
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.2)
    raise AssertionError(f"no cell measured on {hosts} host(s) within 180 s")


def test_a_killed_study_run_is_refused_a_twin_shown_gone_and_resumed_without_its_leftover(sim: Path) -> None:
    """One host: the study's process itself measures, so SIGKILL leaves its engine up. A second `study run`
    meanwhile is refused naming the first; once it is killed, status says so, and the resume takes the
    leftover engine down and measures that cell again instead of waiting on its port."""
    home = sim.parent / "home-killed"
    port = free_port()
    slow = ["--tpot-ms", "15"]  # long enough a level to be killed in
    path = study_file(
        sim.parent,
        "killed",
        [{"engine": "harness", "profile": "smoke", "overrides": {"extra_args": [slow, [*slow, "--ttft-ms", "30"]]}}],
        ["sim-h100"],
    )
    env = {**os.environ, "LABCTL_HOME": str(home), "LABCTL_LAB": str(sim)}
    argv = [*LABCTL, "study", "run", str(path), "--port", str(port)]
    proc = subprocess.Popen(argv, env=env, cwd=sim, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _until_a_cell_measures(home, "killed", proc)
        twin = labctl(sim, home, "study", "run", str(path), "--port", str(port))
        assert twin.returncode == 3, twin.stderr
        assert f"study killed is already running: pid {proc.pid} on " in twin.stderr, twin.stderr
        proc.kill()
        proc.communicate(timeout=60)
        assert ours_running(sim.parent), "the killed process itself ran the cell: its engine is still up"
        shown = json.loads(labctl(sim, home, "study", "status", "killed", "--json").stdout)
        assert "interrupted (its study run is gone)" in [c["state"] for c in shown["cells"]], shown

        again = labctl(sim, home, "study", "run", str(path), "--port", str(port))
        assert again.returncode == 0, again.stderr
        assert "left running by a study run that is gone; took down its run" in again.stderr + again.stdout
        assert {v["state"] for v in cells(home, "killed").values()} == {"done"}
        assert ours_running(sim.parent) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)


def test_a_killed_study_run_on_two_hosts_takes_its_workers_and_their_engines_with_it(sim: Path) -> None:
    """Two hosts: a process each, forked. SIGKILL of the study run ends them too (their parent's death is
    their stop signal): they take their engines down and measure nothing more."""
    home = sim.parent / "home-killed-two"
    port = free_port()
    slow = ["--tpot-ms", "15"]
    path = study_file(
        sim.parent,
        "killed-two",
        [{"engine": "harness", "profile": "smoke", "overrides": {"extra_args": [slow, [*slow, "--ttft-ms", "30"]]}}],
        ["sim-h100", "sim-gb10"],
    )
    env = {**os.environ, "LABCTL_HOME": str(home), "LABCTL_LAB": str(sim)}
    argv = [*LABCTL, "study", "run", str(path), "--port", str(port)]
    proc = subprocess.Popen(argv, env=env, cwd=sim, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _until_a_cell_measures(home, "killed-two", proc, hosts=2)
        proc.kill()
        proc.communicate(timeout=60)
        deadline = time.monotonic() + 90
        while ours_running(sim.parent) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert ours_running(sim.parent) == [], "a worker went on alone after its study run was killed"
        states = cells(home, "killed-two")
        assert "running" not in {v["state"] for v in states.values()}, states
        assert "interrupted" in {v["state"] for v in states.values()}, states
        time.sleep(5)  # nothing starts another cell afterwards
        assert ours_running(sim.parent) == [] and len(cells(home, "killed-two")) == len(states)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
