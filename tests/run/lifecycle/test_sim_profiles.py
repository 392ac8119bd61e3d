"""Every shipped profile, run for real on the simulated GPU lab (build/sim-lab: the engines' personas on
simulated GPUs, a second Docker daemon with the NVIDIA device driver): up → a chat completion through the
official openai SDK → status healthy → down. Resident variants with keys, exclusivity by device id and by
count, a foreign process holding GPU memory, the memory-fit refusal, a driver too old for the image.

The GPUs are simulated (scripts/sim/nvidia-smi); everything else — Docker, the device request, the
persona's command line checked against the engine's contract, the HTTP API — is real."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import yaml
from helpers.harness_proc import free_port
from helpers.loopback_hub import GRANTED_TOKEN, LoopbackHub, loopback_hub
from helpers.sim_lab import require_sim_lab
from helpers.support import LABCTL, REPO, Result, ensure_second_user, run_labctl

SIM = REPO / "build" / "sim-lab"
SOCKETS = {"sim-h100": "/var/run/labctl-sim/docker.sock", "sim-gb10": "/var/run/labctl-sim/gb10/docker.sock"}
H100 = [
    ("vllm", "qwen3-32b"),
    ("vllm", "qwen2.5-7b"),
    ("sglang", "qwen3-32b"),
    ("sglang", "qwen2.5-7b"),
    ("trtllm", "qwen3-32b"),
]
GB10 = [("atlas", "qwen3.6-35b-a3b-fp8"), ("vllm", "qwen3.6-35b-a3b-fp8"), ("sglang", "qwen3.6-35b-a3b-fp8")]

pytestmark = [pytest.mark.docker, pytest.mark.lab]  # the simulated GPU lab or labb: one test at a time


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackHub]:
    """The Hub `up` fetches models from: the shipped stand-in repositories on loopback, into a private cache."""
    with loopback_hub() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path / "hf"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server


@pytest.fixture
def sim(tmp_path: Path, hub: LoopbackHub) -> Iterator[Path]:
    """A private copy of build/sim-lab (profiles and the hosts' stand-in configs may be changed here)."""
    require_sim_lab()
    lab = tmp_path / "sim-lab"
    shutil.copytree(SIM, lab, ignore=shutil.ignore_patterns("runs", ".state"))
    hosts = yaml.safe_load((lab / "hosts.yaml").read_text())
    for name, entry in hosts["hosts"].items():  # each host's nvidia-smi reads a config this test owns
        config = Path(entry["nvidia_smi"][-1])
        private = tmp_path / f"{name}.json"
        shutil.copy(config, private)
        entry["nvidia_smi"][-1] = str(private)
    (lab / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    yield lab
    for socket in SOCKETS.values():  # nothing this test started may outlive it
        env = {**os.environ, "DOCKER_HOST": f"unix://{socket}"}
        ids = subprocess.run(
            ["docker", "ps", "-aq", "--filter", "label=labctl.run_id"], capture_output=True, text=True, env=env
        ).stdout.split()
        ours = [i for i in ids if _home_of(i, env, tmp_path)]
        if ours:
            subprocess.run(["docker", "rm", "-f", *ours], capture_output=True, env=env)


def _home_of(container: str, env: dict[str, str], tmp_path: Path) -> bool:
    out = subprocess.run(
        ["docker", "inspect", "-f", '{{index .Config.Labels "com.docker.compose.project.working_dir"}}', container],
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    return str(tmp_path) in out


def labctl(lab: Path, *args: str, host: str = "sim-h100", timeout: float = 180) -> Result:
    return run_labctl("--host", host, *args, lab=lab, env={"LABCTL_HOME": str(lab)}, timeout=timeout)


def stand_in(lab: Path, host: str) -> Path:
    return Path(yaml.safe_load((lab / "hosts.yaml").read_text())["hosts"][host]["nvidia_smi"][-1])


def edit_stand_in(lab: Path, host: str, **changes: object) -> None:
    path = stand_in(lab, host)
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if key == "gpu0_used_mib":
            config["gpus"][0]["memory_used_mib"] = value
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def up(lab: Path, engine: str, profile: str, *args: str, host: str = "sim-h100") -> dict:
    result = labctl(lab, "up", engine, "--profile", profile, "--port", str(free_port()), "--json", *args, host=host)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def chat(info: dict, key: str = "not-needed") -> str:
    client = openai.OpenAI(base_url=info["base_url"], api_key=key, max_retries=0, timeout=30)
    reply = client.chat.completions.create(
        model=info["model"],
        messages=[{"role": "user", "content": "Hello, lab"}],
        max_tokens=8,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    return reply.choices[0].message.content or ""


@pytest.mark.parametrize(("engine", "profile"), H100)
def test_h100_profiles_run_end_to_end(sim: Path, engine: str, profile: str) -> None:
    info = up(sim, engine, profile)
    assert info["health"] == "healthy" and info["environment_label"] == "harness-check"
    assert info["simulated_gpu"] and info["host"] == "sim-h100"
    record = json.loads(Path(info["record"]).read_text())
    assert record["environment_label"] == "harness-check" and record["gpus"]["simulated"]
    assert [d["uuid"].startswith("GPU-") for d in record["gpus"]["devices"]] == [True] * len(info["gpus"])
    assert record["engine_setup"]["contract"].startswith(f"engines/{engine}/cli/")
    assert chat(info)
    status = json.loads(labctl(sim, "status", "--json").stdout)
    assert any(s["run_id"] == info["run_id"] and s["health"] == "healthy" for s in status)
    assert labctl(sim, "down", info["run_id"]).code == 0


@pytest.mark.parametrize(("engine", "profile"), GB10)
def test_gb10_profiles_run_on_the_simulated_spark(sim: Path, engine: str, profile: str) -> None:
    info = up(sim, engine, profile, host="sim-gb10")
    assert info["gpu_devices"][0]["name"] == "Simulated NVIDIA GB10" and info["environment_label"] == "harness-check"
    record = json.loads(Path(info["record"]).read_text())
    assert record["engine_setup"]["memory_fit"]["unified_memory"]
    assert chat(info)
    assert labctl(sim, "down", info["run_id"], host="sim-gb10").code == 0


@pytest.mark.parametrize(
    ("engine", "profile", "host"),
    [
        ("vllm", "qwen2.5-7b", "sim-h100"),
        ("sglang", "qwen2.5-7b", "sim-h100"),
        ("atlas", "qwen3.6-35b-a3b-fp8", "sim-gb10"),
    ],
)
def test_resident_keys_guard_the_api(sim: Path, engine: str, profile: str, host: str) -> None:
    """Each engine's own key mechanism (VLLM_API_KEY, --api-key, --auth-tokens-file) through the persona."""
    info = up(sim, engine, profile, "--resident", host=host)
    key = json.loads(labctl(sim, "share", info["run_id"], "--json", host=host).stdout)["api_key"]
    with pytest.raises(openai.AuthenticationError):
        chat(info, key="wrong-key")
    assert chat(info, key=key)
    assert labctl(sim, "down", info["run_id"], host=host).code == 0


def test_who_can_see_a_flag_style_key_is_said_once_and_true(sim: Path) -> None:
    """SGLang takes its key on argv: `up` and `share` say who can see it, and what they say holds — another
    local user reads it with `ps`; `docker inspect`, the record and the compose file do not hold it."""
    ensure_second_user("labtest2")
    result = labctl(sim, "up", "sglang", "--profile", "qwen2.5-7b", "--port", str(free_port()), "--resident")
    assert result.code == 0, result.stderr
    said = (result.stdout + result.stderr).count("sglang takes its API key on its command line: every local user")
    assert said == 1, result.stdout + result.stderr
    run_id = next((sim / "runs").iterdir()).name
    shared = labctl(sim, "share", run_id)
    assert shared.stderr.count("every local user of the engine's host can read it with `ps`") == 1
    info = json.loads(labctl(sim, "share", run_id, "--json").stdout)
    key = info["api_key"]
    assert "hidepid" in info["key_visibility"]
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    seen = subprocess.run([runuser, "-u", "labtest2", "--", "ps", "-eww", "-o", "args"], capture_output=True, text=True)
    assert key in seen.stdout  # what the note says: any local user sees it
    env = {**os.environ, "DOCKER_HOST": f"unix://{SOCKETS['sim-h100']}"}
    ids = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=labctl.run_id={run_id}"], capture_output=True, text=True, env=env
    ).stdout.split()
    inspect = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True, env=env).stdout
    assert ids and key not in inspect
    top = subprocess.run(
        ["docker", "top", ids[0], "-ww", "-o", "pid,args"], capture_output=True, text=True, env=env
    ).stdout
    assert key in top
    for path in (sim / "runs" / run_id).iterdir():
        assert key not in path.read_text(errors="replace"), path
    events = (sim / "runs" / run_id / "events.jsonl").read_text()
    assert "takes its API key on its command line" in events  # the warning is recorded
    assert labctl(sim, "down", run_id).code == 0


def test_two_count_profiles_never_share_a_gpu(sim: Path) -> None:
    path = sim / "engines" / "vllm" / "profiles" / "qwen2.5-7b.yaml"
    path.write_text(path.read_text().replace('gpus:\n  device_ids: ["0"]', "gpus:\n  count: 1"))
    first = up(sim, "vllm", "qwen2.5-7b")
    second = up(sim, "vllm", "qwen2.5-7b")
    assert {tuple(first["gpus"]), tuple(second["gpus"])} == {("0",), ("1",)}
    third = labctl(sim, "up", "vllm", "--profile", "qwen2.5-7b", "--port", str(free_port()))
    assert third.code == 3 and "needs 1 free GPU(s); free now: none" in third.stderr
    for info in (first, second):
        assert labctl(sim, "down", info["run_id"]).code == 0


def test_count_profiles_record_the_concrete_gpus_they_were_given(sim: Path) -> None:
    path = sim / "engines" / "vllm" / "profiles" / "qwen2.5-7b.yaml"
    path.write_text(path.read_text().replace('gpus:\n  device_ids: ["0"]', "gpus:\n  count: 1"))
    held = up(sim, "sglang", "qwen2.5-7b")  # holds GPU 0
    placed = up(sim, "vllm", "qwen2.5-7b")
    record = json.loads(Path(placed["record"]).read_text())
    assert placed["gpus"] == ["1"] and record["gpus"]["ids"] == ["1"] and record["gpus"]["count"] == 1
    assert [d["index"] for d in record["gpus"]["devices"]] == ["1"]
    status = json.loads(labctl(sim, "status", "--json").stdout)
    assert next(s for s in status if s["run_id"] == placed["run_id"])["gpus"] == ["1"]  # the label holds GPU 1
    for info in (held, placed):
        assert labctl(sim, "down", info["run_id"]).code == 0


def test_gpu_ids_the_host_does_not_have_are_refused(sim: Path) -> None:
    result = labctl(sim, "up", "vllm", "--profile", "qwen2.5-7b", "--gpus", "7", "--port", str(free_port()))
    assert result.code == 1 and "Traceback" not in result.stderr, result.stderr
    assert (
        "GPU(s) 7 do not exist here (nvidia-smi lists 0, 1)" in result.stderr and "Nothing was started" in result.stderr
    )
    assert not (sim / "runs").is_dir() or not list((sim / "runs").iterdir())


def test_a_held_gpu_is_refused_and_replace_takes_it(sim: Path) -> None:
    first = up(sim, "vllm", "qwen2.5-7b", "--owner", "alice")
    refused = labctl(sim, "up", "sglang", "--profile", "qwen2.5-7b", "--port", str(free_port()))
    assert refused.code == 3
    assert f"GPU 0 is held by vllm/qwen2.5-7b (run {first['run_id']}, owner alice, since " in refused.stderr
    assert f"Free it with: labctl down {first['run_id']} (or pass --replace)." in refused.stderr
    assert len(list((sim / "runs").iterdir())) == 1  # nothing recorded for the refused run
    second = up(sim, "sglang", "qwen2.5-7b", "--replace")
    assert json.loads(Path(first["record"]).read_text())["replaced_by"] == second["run_id"]
    assert json.loads(Path(second["record"]).read_text())["replaced"] == [first["run_id"]]
    assert labctl(sim, "down", second["run_id"]).code == 0


def test_replace_does_not_stop_another_owners_resident_deployment_on_a_gpu(sim: Path) -> None:
    held = up(sim, "vllm", "qwen2.5-7b", "--resident", "--owner", "alice")
    result = labctl(sim, "up", "sglang", "--profile", "qwen2.5-7b", "--port", str(free_port()), "--replace")
    assert result.code == 3
    assert f"--replace will not stop vllm/qwen2.5-7b (run {held['run_id']}, owner alice" in result.stderr
    status = json.loads(labctl(sim, "status", "--json").stdout)
    assert next(s for s in status if s["run_id"] == held["run_id"])["health"] == "healthy"
    assert labctl(sim, "down", held["run_id"], "--force", "--reason", "test over").code == 0


def test_two_concurrent_ups_on_one_gpu_exactly_one_wins(sim: Path) -> None:
    env = {**os.environ, "LABCTL_LAB": str(sim), "LABCTL_HOME": str(sim)}
    procs = [
        subprocess.Popen(
            [
                *LABCTL,
                "--host",
                "sim-h100",
                "up",
                engine,
                "--profile",
                "qwen2.5-7b",
                "--port",
                str(free_port()),
                "--json",
            ],
            env=env,
            cwd=sim,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for engine in ("vllm", "sglang")
    ]
    codes = sorted(p.wait(180) for p in procs)
    errors = [p.stderr.read() for p in procs]  # type: ignore[union-attr]
    assert codes == [0, 3], errors
    assert any("GPU 0 is held by" in e for e in errors)


def test_foreign_gpu_memory_and_memory_fit_refusals(sim: Path) -> None:
    edit_stand_in(
        sim, "sim-h100", processes=[{"gpu_index": 0, "pid": 4242, "process_name": "python3", "used_memory_mib": 70000}]
    )
    foreign = labctl(sim, "up", "vllm", "--profile", "qwen2.5-7b", "--port", str(free_port()))
    assert foreign.code == 2 and "does not fit the free memory of GPU(s) 0" in foreign.stderr
    assert "ways out:" in foreign.stderr
    allowed = labctl(sim, "up", "vllm", "--profile", "qwen2.5-7b", "--port", str(free_port()), "--allow-unfit")
    assert allowed.code == 1 and "held by processes labctl did not start: GPU 0: pid 4242" in allowed.stderr


def test_a_driver_too_old_for_the_image_is_refused(sim: Path) -> None:
    edit_stand_in(sim, "sim-h100", driver_version="570.124.06", cuda_version="12.8")
    result = labctl(sim, "up", "vllm", "--profile", "qwen3-32b", "--port", str(free_port()))
    assert result.code == 2 and "needs CUDA 13, but this host's driver supports CUDA 12.8" in result.stderr
    assert "Traceback" not in result.stderr


def seeded_cache(root: Path, model: str = "Qwen/Qwen3-32B") -> Path:
    """A tiny stand-in of the model's Hub repository in the HF cache layout: its real config.json numbers,
    no weights (the persona's build stand-ins read the config; nothing is downloaded)."""
    commit = "a" * 40
    repo = root / "hub" / f"models--{model.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "num_hidden_layers": 64,
        "num_key_value_heads": 8,
        "num_attention_heads": 64,
        "head_dim": 128,
        "hidden_size": 5120,
        "torch_dtype": "bfloat16",
    }
    (snapshot / "config.json").write_text(json.dumps(config))
    return root


def test_tensorrt_build_then_serve_then_reuse(sim: Path, tmp_path: Path) -> None:
    cache = seeded_cache(tmp_path / "hf")
    store = tmp_path / "engines"
    env = {"LABCTL_HOME": str(sim), "LABCTL_ENGINE_STORE": str(store)}

    def up_engine(*args: str) -> Result:
        return run_labctl(
            "--host",
            "sim-h100",
            "up",
            "trtllm",
            "--profile",
            "qwen3-32b-engine",
            "--port",
            str(free_port()),
            "--cache-dir",
            str(cache),
            "--json",
            *args,
            lab=sim,
            env=env,
            timeout=300,
        )

    first = up_engine()
    assert first.code == 0, first.stderr
    info = json.loads(first.stdout.strip().splitlines()[-1])
    record = json.loads(Path(info["record"]).read_text())
    build = record["timings"]["engine_build_s"]
    assert build["skipped"] is False and (Path(build["engine_dir"]) / "config.json").is_file()
    assert (
        record["prep"]["engine_build"]["cached"] is False
        and record["prep"]["engine_build"]["detail"] == build["engine_dir"]
    )
    assert not list(store.glob("*/*.ckpt")), "the converted checkpoint is deleted after a build"
    assert info["model"] == "qwen3-32b" and chat(info)
    bench = run_labctl(
        "bench",
        "run",
        info["run_id"],
        "--workload",
        "latency-probe",
        "--concurrency",
        "128",
        "--requests",
        "2",
        lab=sim,
        env=env,
    )
    assert bench.code == 2 and "built with max_batch_size 64" in bench.stderr
    build_logs = ("--host", "sim-h100", "logs", info["run_id"], "--service", "build")
    live = run_labctl(*build_logs, lab=sim, env=env)
    assert live.code == 0 and "Total time of building all engines" in live.stdout, live.stderr  # its own output
    assert run_labctl("--host", "sim-h100", "down", info["run_id"], lab=sim, env=env).code == 0
    saved = run_labctl(*build_logs, lab=sim, env=env)  # kept beside the record once the containers are gone
    assert saved.code == 0 and saved.stdout == live.stdout
    second = up_engine()
    assert second.code == 0, second.stderr
    again = json.loads(Path(json.loads(second.stdout.strip().splitlines()[-1])["record"]).read_text())
    assert again["timings"]["engine_build_s"]["skipped"] is True
    assert again["prep"]["engine_build"]["cached"] is True and again["prep"]["model_fetch"]["cached"] is True
    assert run_labctl("--host", "sim-h100", "down", again["run_id"], lab=sim, env=env).code == 0
    profile = sim / "engines" / "trtllm" / "profiles" / "qwen3-32b-engine.yaml"
    profile.write_text(profile.read_text().replace("max_batch_size: 64", "max_batch_size: 32"))
    third = up_engine()
    assert third.code == 0, third.stderr
    rebuilt = json.loads(Path(json.loads(third.stdout.strip().splitlines()[-1])["record"]).read_text())
    assert rebuilt["timings"]["engine_build_s"]["skipped"] is False
    assert rebuilt["timings"]["engine_build_s"]["engine_dir"] != build["engine_dir"]
    assert run_labctl("--host", "sim-h100", "down", rebuilt["run_id"], lab=sim, env=env).code == 0


def test_hosts_lists_each_host_with_its_gpus_and_a_dead_one_quickly(sim: Path) -> None:
    hosts = yaml.safe_load((sim / "hosts.yaml").read_text())
    hosts["hosts"]["gone"] = {"docker": "unix:///var/run/labctl-gone/docker.sock", "simulated": True}
    (sim / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    result = labctl(sim, "hosts", "--json", timeout=60)
    assert result.code == 0, result.stderr
    listed = {h["name"]: h for h in json.loads(result.stdout)}
    assert listed["sim-h100"]["reachable"] == "yes" and len(listed["sim-h100"]["gpus"]) == 2
    assert listed["sim-h100"]["simulated"] and listed["sim-gb10"]["gpus"][0]["memory_total"] == "[N/A]"
    assert listed["gone"]["reachable"] == "no" and listed["gone"]["gpus"] == []


def test_a_bench_on_the_simulated_host_samples_its_gpus_and_the_personas_metrics(sim: Path) -> None:
    """GPU samples come from the host's nvidia-smi stand-in (its configured figures, labelled simulated)
    for exactly the run's GPUs; the vLLM persona's /metrics is read under vLLM's own names."""
    path = stand_in(sim, "sim-h100")
    config = json.loads(path.read_text())
    for gpu in config["gpus"]:
        gpu.update(utilization_gpu=87, power_draw_w=512.25, clocks_sm_mhz=1755)
    path.write_text(json.dumps(config))
    hosts = yaml.safe_load((sim / "hosts.yaml").read_text())
    hosts["hosts"]["sim-h100"]["gpu_hour_price"] = 4.0
    (sim / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    info = up(sim, "vllm", "qwen3-32b")
    result = labctl(
        sim, "bench", "run", info["run_id"], "--workload", "latency-probe", "--requests", "8", "--json", timeout=300
    )
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    telemetry = doc["telemetry"]
    assert telemetry["gpu"]["simulated"] and telemetry["gpu"]["samples"] >= 2 and "gpu" not in telemetry["missing"]
    assert telemetry["gpu"]["gpu_ids"] == info["gpus"]
    assert telemetry["engine"]["names_of"] == "vllm"
    assert telemetry["engine"]["mapping"]["running"] == "vllm:num_requests_running"
    gpus = doc["levels"][0]["telemetry"]["gpu"]["gpus"]
    assert sorted(gpus) == sorted(info["gpus"])
    for gpu in gpus.values():
        assert gpu["name"].startswith("Simulated NVIDIA H100")
        assert gpu["utilization_gpu_pct"] == {"mean": 87.0, "max": 87.0}
        assert gpu["power_draw_w"]["mean"] == 512.25 and gpu["clocks_sm_mhz"]["max"] == 1755.0
    assert doc["levels"][0]["telemetry"]["engine"]["running"]["max"] >= 1
    shown = labctl(sim, "bench", "show", doc["bench_id"])
    assert "simulated util mean 87%" in shown.stdout
    # energy and cost per token from those samples, the run's GPUs and the host's price
    assert doc["target"]["gpus"] == len(info["gpus"]) and doc["target"]["gpu_hour_price"] == 4.0
    [row] = list(csv.DictReader(io.StringIO(labctl(sim, "bench", "show", doc["bench_id"], "--format", "csv").stdout)))
    rate, gpus = float(row["output_throughput"]), len(info["gpus"])
    assert float(row["output_throughput_per_gpu"]) == pytest.approx(rate / gpus)
    assert float(row["joules_per_output_token"]) == pytest.approx(512.25 * gpus / rate)
    assert float(row["cost_per_million_output_tokens"]) == pytest.approx(4.0 * gpus / (rate * 3600) * 1e6)
    assert labctl(sim, "down", info["run_id"]).code == 0


def test_up_fetches_the_model_first_then_a_second_up_finds_it_cached(
    sim: Path, hub: LoopbackHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's "done when": on the simulated GPU host, `up` of a profile whose model is not cached fetches it
    from the loopback Hub first; the record keeps fetch, pull, load and warm-up apart; the engine runs with the Hub
    offline; a second `up` finds the model cached. The model is gated here, so HF_TOKEN is needed and is then
    looked for in everything labctl wrote."""
    repo = hub.repos["Qwen/Qwen2.5-7B-Instruct"]
    repo.gated = True
    monkeypatch.setenv("HF_TOKEN", GRANTED_TOKEN)
    first = labctl(sim, "up", "vllm", "--profile", "qwen2.5-7b", "--port", str(free_port()), "--json")
    assert first.code == 0, first.stderr
    assert "fetching Qwen/Qwen2.5-7B-Instruct@main" in first.stderr
    info = json.loads(first.stdout.strip().splitlines()[-1])
    record = json.loads(Path(info["record"]).read_text())
    prep = record["prep"]
    assert {"model_fetch", "image_pull", "engine_load", "warmup", "first_completion"} <= set(prep)
    total = sum(len(d) for d in repo.files.values())
    assert prep["model_fetch"]["cached"] is False and prep["model_fetch"]["bytes"] == total == hub.bytes_sent(
        repo.repo_id
    )
    assert record["engine_setup"]["model_commit"] == repo.commit
    assert all(prep[p]["seconds"] >= 0 for p in prep)
    compose = (Path(info["record"]).parent / "compose.yaml").read_text()
    assert '"HF_HUB_OFFLINE=1"' in compose
    env = {**os.environ, "DOCKER_HOST": f"unix://{SOCKETS['sim-h100']}"}
    container = record["container"]["id"]
    inspect = subprocess.run(["docker", "inspect", container], capture_output=True, text=True, env=env).stdout
    assert "HF_HUB_OFFLINE=1" in inspect
    assert chat(info)
    shown = labctl(sim, "show", info["run_id"])
    assert "prep model_fetch" in shown.stdout and "prep warmup" in shown.stdout
    listed = json.loads(labctl(sim, "runs", "--json").stdout)
    assert next(r for r in listed if r["run"] == info["run_id"])["prep"]["model_fetch"]["cached"] is False
    assert labctl(sim, "down", info["run_id"]).code == 0

    second = labctl(sim, "up", "vllm", "--profile", "qwen2.5-7b", "--port", str(free_port()), "--json")
    assert second.code == 0, second.stderr
    again = json.loads(second.stdout.strip().splitlines()[-1])
    warm = json.loads(Path(again["record"]).read_text())["prep"]
    assert warm["model_fetch"]["cached"] is True and warm["model_fetch"]["bytes"] == 0
    assert hub.bytes_sent(repo.repo_id) == total
    assert labctl(sim, "down", again["run_id"]).code == 0

    written = [first.stdout, first.stderr, second.stdout, second.stderr]
    for run in (info, again):
        folder = Path(run["record"]).parent
        written += [p.read_text(errors="replace") for p in folder.iterdir() if p.is_file()]
    assert not [text for text in written if GRANTED_TOKEN in text]


def test_a_missing_model_fails_before_any_container_starts(sim: Path, hub: LoopbackHub) -> None:
    del hub.repos["Qwen/Qwen3-32B"]
    result = labctl(sim, "up", "sglang", "--profile", "qwen3-32b", "--port", str(free_port()))
    assert result.code == 2 and "Qwen/Qwen3-32B does not exist on the Hub" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(sim.glob("runs/*/record.json")), "refused before a record, a compose file or a container"
    offline = labctl(sim, "up", "sglang", "--profile", "qwen3-32b", "--port", str(free_port()), "--no-fetch", "--json")
    assert offline.code == 0, offline.stderr  # the persona loads no weights; a real engine would fail offline
    assert "warning: Qwen/Qwen3-32B@main is not in " in offline.stderr and "labctl fetch sglang" in offline.stderr
    record = json.loads(Path(json.loads(offline.stdout.strip().splitlines()[-1])["record"]).read_text())
    assert "model_fetch" not in record["prep"] and record["engine_setup"]["model_commit"] is None
    assert labctl(sim, "down", record["run_id"]).code == 0
    port = str(free_port())  # reproduce takes --no-fetch too
    again = labctl(sim, "reproduce", record["run_id"], "--port", port, "--no-fetch", "--json")
    assert again.code == 0 and "--no-fetch: the engine starts from what the model cache holds" in again.stderr
    assert labctl(sim, "down", json.loads(again.stdout.strip().splitlines()[-1])["run_id"]).code == 0


def test_reproduce_fetches_again_and_says_when_the_branch_now_names_another_commit(sim: Path, hub: LoopbackHub) -> None:
    info = up(sim, "vllm", "qwen2.5-7b")
    assert labctl(sim, "down", info["run_id"]).code == 0
    repo = hub.repos["Qwen/Qwen2.5-7B-Instruct"]
    original = repo.commit
    repo.files["README.md"] += b"\nmain moved on.\n"
    repo.branches["main"] = repo.commit
    # A sim-lab run re-renders as it ran (labelled harness-check): no drift to allow.
    again = labctl(sim, "reproduce", info["run_id"], "--port", str(free_port()), "--json")
    assert again.code == 0, again.stderr
    assert "differs from what its setup renders" not in again.stderr
    assert f"now names commit {repo.commit}; the original ran {original}: the weights may differ" in again.stderr
    record = json.loads(Path(json.loads(again.stdout.strip().splitlines()[-1])["record"]).read_text())
    assert record["engine_setup"]["model_commit"] == repo.commit and record["prep"]["model_fetch"]["cached"] is False
    assert labctl(sim, "down", record["run_id"]).code == 0
