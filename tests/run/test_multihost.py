"""A lab of several hosts through Docker's own ssh:// transport, on the remote lab host `labb`
(`make remote-lab`: a dockerd and an sshd in network namespace labb, a simulated GPU stand-in).

`up --host labb` → the official openai SDK through labctl's SSH forward → `status` lists it under labb →
`down` removes it (containers, on-host claims, forward); two controllers (two processes, two homes, two
lock files, as two laptops would be) racing for labb's one GPU → exactly one winner; a claim left by a
killed `up` is reconciled; a dead and a hung host are reported unreachable without hanging `status`.
Only loopback and 10.201.0.2 (inside the namespace the project's own script creates) are used.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from helpers.lifecycle_helpers import write_profile
from helpers.loopback_hub import LoopbackHub, loopback_hub
from helpers.support import IN_CI, LABCTL, REPO, Result, remove_orphans_on_labb, run_labctl

from labctl.catalog.hosts_file import HostEntry
from labctl.host.remote.ports import listeners

pytestmark = [pytest.mark.docker, pytest.mark.lab, pytest.mark.labb]  # labb's own tier: one test at a time

DOCKER_URL = "ssh://labctl-remote@10.201.0.2"
SSH_TARGET = "labctl-remote@10.201.0.2"
LABB_SOCKET = Path("/var/run/labctl-labb/docker.sock")
REGISTERED = REPO / "build" / "remote-lab" / "hosts.yaml"


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true and {reason}: CI must provision it (make remote-lab)", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}; run `make remote-lab` (as root) to test a host reached over SSH")


def remote_docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "-H", DOCKER_URL, *args], capture_output=True, text=True, timeout=timeout)


def served(base_url: str) -> int:
    """Requests the harness engine has answered, from its own counter (through the controller's forward)."""
    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=10).text
    found = re.search(r"^harness_requests_success_total\{[^}]*\} (\d+)$", text, re.MULTILINE)
    assert found, text
    return int(found.group(1))


def remote_names(label: str) -> list[str]:
    out = remote_docker("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}").stdout
    return out.split()


def free_labb_port() -> int:
    """A port in the helpers' range that no labctl run or claim on labb uses now (the claim decides races)."""
    taken = set(remote_docker("ps", "-a", "--format", "{{.Names}}").stdout.split())
    for port in random.sample(range(18700, 18800), 100):
        if f"labctl-port-{port}" not in taken:
            return port
    raise AssertionError("no free port in 18700-18799 on labb")


@pytest.fixture(scope="module")
def labb() -> dict:
    if shutil.which("docker") is None or shutil.which("ssh") is None:
        _missing("the docker CLI or the ssh client is not installed")
    if not LABB_SOCKET.is_socket() or not REGISTERED.is_file():
        _missing(f"the remote lab is not up ({LABB_SOCKET} or {REGISTERED} is absent)")
    probe = subprocess.run(["ssh", SSH_TARGET, "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        _missing(f"`ssh {SSH_TARGET} true` fails ({probe.stderr.strip()[-200:]})")
    entry: dict = yaml.safe_load(REGISTERED.read_text())["hosts"]["labb"]
    remove_orphans_on_labb()
    return entry


@pytest.fixture
def homes(tmp_path: Path) -> Iterator[list[Path]]:
    """Two controllers' homes; whatever their runs left on labb is removed afterwards."""
    made = [tmp_path / "home-a", tmp_path / "home-b"]
    for home in made:
        home.mkdir()
    yield made
    for home in made:
        for run_dir in (home / "runs").iterdir() if (home / "runs").is_dir() else []:
            for label in (f"labctl.run_id={run_dir.name}", f"labctl.claim.run_id={run_dir.name}"):
                names = remote_names(label)
                if names:
                    remote_docker("rm", "-f", *names)
            record = run_dir / "record.json"
            forward = json.loads(record.read_text()).get("forward") if record.is_file() else None
            if forward and forward.get("process"):
                pid = int(forward["process"].split(":")[0])
                cmdline = Path(f"/proc/{pid}/cmdline")
                if cmdline.exists() and b"ssh" in cmdline.read_bytes():
                    os.kill(pid, 15)


def env_of(home: Path) -> dict[str, str]:
    return {"LABCTL_HOME": str(home), "LABCTL_LOCK_FILE": str(home / "gpus.lock")}


def labctl(
    home: Path, *args: str, lab: Path | None = None, timeout: float = 180, env: dict[str, str] | None = None
) -> Result:
    return run_labctl(*args, lab=lab, env={**env_of(home), **(env or {})}, timeout=timeout)


def test_up_on_labb_answers_from_the_controller_status_lists_it_and_down_removes_it(
    labb: dict, homes: list[Path]
) -> None:
    home = homes[0]
    port = free_labb_port()
    # The issue's own command, from the checkout (the host `labb` is the one `make remote-lab` registered).
    up = labctl(
        home, "up", "harness", "--profile", "smoke", "--allow-unpinned", "--host", "labb", "--json", "--port", str(port)
    )
    assert up.code == 0, up.stderr
    info = json.loads(up.stdout.strip().splitlines()[-1])
    run_id, base_url = info["run_id"], info["base_url"]
    assert info["host"] == "labb" and base_url.startswith("http://127.0.0.1:")

    client = openai.OpenAI(base_url=base_url, api_key="none", timeout=30)
    reply = client.chat.completions.create(
        model=info["model"], messages=[{"role": "user", "content": "Hello from the controller"}], max_tokens=8
    )
    assert reply.choices[0].message.content

    record = json.loads((home / "runs" / run_id / "record.json").read_text())
    daemon = json.loads(remote_docker("info", "--format", "{{json .}}").stdout)
    assert record["host_entry"] == "labb" and record["docker_endpoint"] == DOCKER_URL
    assert record["docker_host_id"] == daemon["ID"] and record["docker_host_name"] == daemon["Name"] == "labb"
    assert record["forward"]["remote"] == f"127.0.0.1:{port}"
    assert remote_names(f"labctl.claim.run_id={run_id}") == [f"labctl-port-{port}"]
    assert (
        subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=labctl.run_id={run_id}"], capture_output=True, text=True
        ).stdout
        == ""
    )

    status = labctl(home, "status", "--json")
    assert status.code == 0, status.stderr
    mine = [r for r in json.loads(status.stdout) if r["run_id"] == run_id]
    assert len(mine) == 1 and mine[0]["host"] == "labb" and mine[0]["health"] == "healthy", mine
    assert mine[0]["base_url"] == base_url

    # The forward dies (a reboot, a killed ssh): the next status reopens it, on the same local port.
    os.kill(int(record["forward"]["process"].split(":")[0]), 15)
    time.sleep(0.5)
    again = [r for r in json.loads(labctl(home, "status", "--json", "--host", "labb").stdout) if r["run_id"] == run_id]
    assert again[0]["health"] == "healthy" and again[0]["base_url"] == base_url, again
    events = (home / "runs" / run_id / "events.jsonl").read_text()
    assert '"forward reopened"' in events
    assert client.models.list().data[0].id == info["model"]

    evaluated = labctl(home, "eval", "run", run_id, "--suite", "short-answer", "--host", "labb", "--json")
    assert evaluated.code == 0, evaluated.stderr
    result = json.loads(evaluated.stdout)
    assert result["run_id"] == run_id and result["total"] > 0 and result["target"]["base_url"] == base_url

    logs = labctl(home, "logs", run_id)  # no --host: the record says where it runs
    assert logs.code == 0 and f"serving {info['model']} on http://127.0.0.1:{port}" in logs.stdout, logs.stderr

    down = labctl(home, "down", run_id)
    assert down.code == 0, down.stderr
    assert remote_names(f"labctl.run_id={run_id}") == []
    assert remote_names(f"labctl.claim.run_id={run_id}") == []
    with pytest.raises(openai.APIConnectionError):
        openai.OpenAI(base_url=base_url, api_key="none", timeout=5, max_retries=0).models.list()
    assert json.loads((home / "runs" / run_id / "record.json").read_text())["status"] == "stopped"


def gpu_lab(lab: Path, labb: dict) -> Path:
    """The harness engine as a GPU engine (the simulated H100 on labb, Docker's device request, a claim)."""
    engine_file = lab / "engines" / "harness" / "engine.yaml"
    engine = yaml.safe_load(engine_file.read_text())
    engine["gpu"]["required"] = True
    # A GPU engine states its memory fit (the harness's model has no size, so the fit itself is not computed).
    engine["memory_setting"] = yaml.safe_load((lab / "engines" / "vllm" / "engine.yaml").read_text())["memory_setting"]
    engine_file.write_text(yaml.safe_dump(engine, sort_keys=False))
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"labb": labb}}))
    return lab


def write_gpu_profile(lab: Path, name: str, port: int) -> None:
    """A harness profile asking for labb's GPU 0 (the lab's harness engine is a GPU engine here)."""
    write_profile(lab, name, port)
    path = lab / "engines" / "harness" / "profiles" / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    data["gpus"] = {"device_ids": ["0"]}
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_two_controllers_racing_for_labbs_gpu_exactly_one_wins(labb: dict, homes: list[Path], lab: Path) -> None:
    gpu_lab(lab, labb)
    ports = [free_labb_port(), free_labb_port()]
    while ports[1] == ports[0]:
        ports[1] = free_labb_port()
    for name, port in zip(("race-a", "race-b"), ports, strict=True):
        write_gpu_profile(lab, name, port)
    procs = [
        subprocess.Popen(
            [*LABCTL, "--host", "labb", "up", "harness", "--profile", name, "--allow-unpinned", "--json"],
            cwd=lab,
            env={**os.environ, "LABCTL_LAB": str(lab), **env_of(home)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, home in zip(("race-a", "race-b"), homes, strict=True)
    ]
    try:
        results = [proc.communicate(timeout=900) for proc in procs]
    finally:  # an `up` still running would claim labb's GPU after this test's clean-up, for the next tests
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()  # labctl takes down what it started on SIGTERM; the homes fixture removes the rest
                proc.wait(timeout=120)
    codes = [proc.returncode for proc in procs]
    assert sorted(codes) == [0, 3], f"exit codes {codes}: {results}"
    winner = codes.index(0)
    info = json.loads(results[winner][0].strip().splitlines()[-1])
    loser_err = results[1 - winner][1]
    assert info["run_id"] in loser_err and "GPU 0" in loser_err, loser_err
    uuid = info["gpu_devices"][0]["uuid"]
    assert sorted(remote_names(f"labctl.claim.run_id={info['run_id']}")) == sorted(
        [f"labctl-gpu-{uuid}", f"labctl-port-{ports[winner]}"]
    )
    loser_runs = homes[1 - winner] / "runs"
    for run_dir in loser_runs.iterdir() if loser_runs.is_dir() else []:
        assert remote_names(f"labctl.run_id={run_dir.name}") == []
        assert remote_names(f"labctl.claim.run_id={run_dir.name}") == []

    listed = {h["name"]: h for h in json.loads(labctl(homes[1 - winner], "hosts", "--json", lab=lab).stdout)}
    assert listed["labb"]["gpus"][0]["held_by"] == info["run_id"], listed["labb"]

    down = labctl(homes[winner], "down", info["run_id"], lab=lab)
    assert down.code == 0, down.stderr
    assert remote_names(f"labctl.claim.run_id={info['run_id']}") == []


def test_a_claim_left_by_a_killed_up_is_reconciled_and_a_live_one_from_elsewhere_is_not(
    labb: dict, homes: list[Path], lab: Path
) -> None:
    """The state a SIGKILLed `up` leaves between claiming and starting: a claim whose run has no container
    and whose `up` process is gone. The next `up` for that GPU removes it and says so. A claim from another
    controller machine still within its deadline is respected (exit 3)."""
    from labctl.host.gpus.claims import Claim, gpu_claim_name

    gpu_lab(lab, labb)
    uuid = subprocess.run(
        ["ssh", SSH_TARGET, *labb["nvidia_smi"], "--query-gpu=uuid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    gone = subprocess.Popen(["true"])
    gone.wait()
    image = "127.0.0.1:5000/labctl/harness:dev"
    assert remote_docker("pull", "-q", image, timeout=180).returncode == 0

    def plant(controller: str, up_process: str, run_id: str) -> None:
        claim = Claim(
            name=gpu_claim_name(uuid),
            what=f"GPU 0 ({uuid})",
            run_id=run_id,
            owner="bob",
            controller=controller,
            home="/elsewhere",
            up_process=up_process,
            claimed_at="2026-12-03T00:00:00Z",
            deadline=time.time() + 3600,
        )
        labels = [arg for key, value in claim.labels().items() for arg in ("--label", f"{key}={value}")]
        made = remote_docker("create", "--name", claim.name, *labels, "--network", "none", image, "true")
        assert made.returncode == 0, made.stderr

    write_gpu_profile(lab, "claimed", free_labb_port())
    plant("another-laptop", "1:1", "20261203-000000-0000aa")
    try:
        held = labctl(homes[0], "--host", "labb", "up", "harness", "--profile", "claimed", "--allow-unpinned", lab=lab)
        assert held.code == 3, held.stderr
        assert "20261203-000000-0000aa" in held.stderr and "another-laptop" in held.stderr and "advisory" in held.stderr
    finally:
        remote_docker("rm", "-f", gpu_claim_name(uuid))

    plant(socket.gethostname(), f"{gone.pid}:0", "20261203-000000-0000bb")
    try:
        up = labctl(
            homes[0], "--host", "labb", "up", "harness", "--profile", "claimed", "--allow-unpinned", "--json", lab=lab
        )
        assert up.code == 0, up.stderr
        assert "removed the stale claim on GPU 0" in up.stderr and "20261203-000000-0000bb" in up.stderr
        run_id = json.loads(up.stdout.strip().splitlines()[-1])["run_id"]
        assert labctl(homes[0], "down", run_id, lab=lab).code == 0
    finally:
        remote_docker("rm", "-f", gpu_claim_name(uuid))


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A host that accepts a connection and never speaks: ssh waits for its banner."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    server.close()


def test_status_reports_a_dead_and_a_hung_host_unreachable_without_hanging(
    labb: dict, homes: list[Path], lab: Path, silent_listener: int
) -> None:
    hosts = {
        "labb": labb,
        "dead": {"docker": "ssh://labctl-remote@10.201.0.2:1"},
        "hung": {"docker": f"ssh://labctl-remote@127.0.0.1:{silent_listener}"},
    }
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": hosts}))
    # The hung host is cut off at its deadline (3 x 20 s), never waited for: the subprocess's 150 s says so.
    status = labctl(homes[0], "status", lab=lab, timeout=150, env={"LABCTL_HOST_TIMEOUT_S": "20"})
    assert status.code == 1, status.stderr  # the listing is incomplete: a script must not read it as whole
    for name in ("local", "labb", "dead", "hung"):
        assert f"== host {name} (" in status.stdout, status.stdout
    assert "host dead (ssh://labctl-remote@10.201.0.2:1): unreachable" in status.stderr
    assert f"host hung (ssh://labctl-remote@127.0.0.1:{silent_listener}): unreachable" in status.stderr
    assert "host labb" not in status.stderr and "host local" not in status.stderr
    as_json = labctl(homes[0], "status", "--json", lab=lab, timeout=150, env={"LABCTL_HOST_TIMEOUT_S": "20"})
    assert as_json.code == 1 and "host hung" in as_json.stderr, as_json
    silent = {r["host"]: r["problem"] for r in json.loads(as_json.stdout) if r["run_id"] is None}
    assert set(silent) == {"dead", "hung"} and all("unreachable" in p for p in silent.values()), silent
    bad = labctl(homes[0], "status", lab=lab, env={"LABCTL_HOST_TIMEOUT_S": "nan"})
    assert bad.code == 2 and "LABCTL_HOST_TIMEOUT_S='nan'" in bad.stderr and "Traceback" not in bad.stderr, bad


def test_bench_on_a_labb_run_runs_the_client_on_labb_and_stores_the_result_here(labb: dict, homes: list[Path]) -> None:
    """The client runs in a container of labctl's image with host networking on labb (LABCTL_CLIENT_IMAGE
    names a locally built one; default: the harness image `make harness-image` builds with the client)."""
    home = homes[0]
    up = labctl(
        home,
        "up",
        "harness",
        "--profile",
        "smoke",
        "--allow-unpinned",
        "--host",
        "labb",
        "--json",
        "--port",
        str(free_labb_port()),
    )
    assert up.code == 0, up.stderr
    info = json.loads(up.stdout.strip().splitlines()[-1])
    record = json.loads((home / "runs" / info["run_id"] / "record.json").read_text())
    bench = labctl(
        home,
        "bench",
        "run",
        info["run_id"],
        "--workload",
        "latency-probe",
        "--concurrency",
        "1,2",
        "--requests",
        "6",
        "--json",
    )
    assert bench.code == 0, bench.stderr
    result = json.loads(bench.stdout)
    stored = home / "runs" / info["run_id"] / "bench" / f"{result['bench_id']}.json"
    assert json.loads(stored.read_text()) == result
    client = result["client"]
    assert client["ran_on"] == "labb" and client["host"] == "labb" and client["network"] == "host"
    assert client["docker_endpoint"] == DOCKER_URL and client["docker_host_id"] == record["docker_host_id"]
    assert client["container_image_digests"], client
    assert result["status"] == "complete" and [lv["concurrency"] for lv in result["levels"]] == [1, 2]
    assert all(lv["completed"] == lv["requests"] == 6 for lv in result["levels"])
    # The client reached the engine on labb's own loopback, not through the controller's forward.
    assert result["target"]["base_url"] == f"http://127.0.0.1:{record['endpoint']['port']}/v1"
    assert result["target"]["controller_base_url"] == info["base_url"]
    assert remote_names("labctl.bench_client=true") == [] or all(
        result["bench_id"] not in name for name in remote_names("labctl.bench_client=true")
    )

    # A file dataset (made here: labb has no copy of the lab), repeats with intervals, the per-request file
    # and telemetry, as for a local run; the streams over two client processes, both on labb.
    shared = labctl(
        home,
        "bench",
        "run",
        info["run_id"],
        "--workload",
        "sharegpt-sample",
        "--concurrency",
        "2",
        "--requests",
        "6",
        "--repeat",
        "2",
        "--client-workers",
        "2",
        "--json",
    )
    assert shared.code == 0, shared.stderr
    full = json.loads(shared.stdout)
    assert full["client"]["ran_on"] == "labb" and "labb" in full["client"]["clock"]
    assert full["client"]["workers"] == 2 and full["levels"][0]["client_workers"] == 2
    level = full["levels"][0]
    assert [r["requests"] for r in level["repeats"]] == [6, 6] and level["completed"] == 12
    lo, hi = level["median_ttft_ms_ci95"]
    assert lo <= level["median_ttft_ms"] <= hi
    lines = (stored.parent / full["requests_file"]).read_text().splitlines()[1:]
    dataset_lens = sorted(json.loads(line)["input_len"] for line in lines)
    assert len(lines) == 12 and len(set(dataset_lens)) > 1, "the prompts came from the dataset, not random words"
    senders = {json.loads(line)["request_id"].split("-")[1] for line in lines[:6]}
    assert len(senders) == 2, "a repeat's requests came from two worker processes"
    assert full["telemetry"]["engine"]["samples"] > 0 and full["telemetry"]["gpu"]["simulated"] is True

    # Ctrl-C mid-level: the requests that came back are kept, marked interrupted; no client is left on labb.
    served_before = served(info["base_url"])
    long_bench = subprocess.Popen(
        [*LABCTL, "bench", "run", info["run_id"], "--workload", "latency-probe", "--concurrency", "1"]
        + ["--requests", "400", "--json"],
        env={**os.environ, **env_of(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Measuring has begun once the engine has answered the 3 warm-up requests and 2 measured ones: a fixed
    # sleep after the client container appears is not enough on a loaded machine (its Python starts slowly).
    deadline = time.monotonic() + 120
    while served(info["base_url"]) < served_before + 5 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert remote_names("labctl.bench_client=true"), "the bench client runs in a container on labb"
    long_bench.send_signal(signal.SIGINT)
    _out, err = long_bench.communicate(timeout=60)
    assert long_bench.returncode == 130, err
    partial = max((stored.parent).glob("b*.json"), key=lambda f: f.stat().st_mtime)
    cut = json.loads(partial.read_text())
    assert cut["status"] == "interrupted" and cut["levels"][0]["interrupted"] is True
    assert 0 < cut["levels"][0]["requests"] < 400
    assert not [n for n in remote_names("labctl.bench_client=true") if cut["bench_id"] in n]
    assert labctl(home, "down", info["run_id"]).code == 0


def test_reproduce_host_labb_rebuilds_a_local_run_there_with_the_same_setup(labb: dict, homes: list[Path]) -> None:
    home = homes[0]
    local_port = free_labb_port()  # any free port in the helpers' range serves on this machine too
    original = labctl(
        home, "up", "harness", "--profile", "smoke", "--allow-unpinned", "--json", "--port", str(local_port)
    )
    if original.code == 3:
        pytest.skip(f"port {local_port} is held on this machine by another run: {original.stderr.strip()}")
    assert original.code == 0, original.stderr
    first = json.loads(original.stdout.strip().splitlines()[-1])
    try:
        again = labctl(home, "reproduce", first["run_id"], "--host", "labb", "--port", str(free_labb_port()), "--json")
        assert again.code == 0, again.stderr
        second = json.loads(again.stdout.strip().splitlines()[-1])
        assert second["host"] == "labb" and second["reproduced_from"] == first["run_id"]
        one = json.loads((home / "runs" / first["run_id"] / "record.json").read_text())
        two = json.loads((home / "runs" / second["run_id"] / "record.json").read_text())
        assert two["image"]["digest"] == one["image"]["digest"]
        assert two["setup"]["compose_sha256"] == one["setup"]["compose_sha256"]
        assert two["reproduction"]["compose_sha256_matches"] is True
        assert two["reproduction"]["original_host_entry"] == "local"
        assert two["reproduction"]["original_docker_host_id"] == one["docker_host_id"] != two["docker_host_id"]
        reply = openai.OpenAI(base_url=second["base_url"], api_key="none", timeout=30).models.list()
        assert [m.id for m in reply.data] == [second["model"]]
        assert labctl(home, "diff", first["run_id"], second["run_id"]).code == 0
        assert labctl(home, "down", second["run_id"]).code == 0
    finally:
        labctl(home, "down", first["run_id"])


@pytest.fixture
def unreachable_image(tmp_path: Path) -> Iterator[tuple[str, str, subprocess.Popen[bytes]]]:
    """An image pinned in a registry on this controller's loopback only (labb's loopback is its own, so labb
    cannot pull it): a real registry (`docker-registry`, as `make docker-lab` runs), an image unique to the
    test (the harness image plus a label, so labb has never seen its id). Yields (pinned ref, image id, registry)."""
    binary = shutil.which("docker-registry")
    if binary is None:
        _missing("docker-registry is not installed (make docker-lab installs it)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "storage": {"filesystem": {"rootdirectory": str(tmp_path / "registry")}},
                "http": {"addr": f"127.0.0.1:{port}"},
            }
        )
    )
    registry = subprocess.Popen(
        [str(binary), "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    tag = f"127.0.0.1:{port}/copytest/harness:{os.urandom(4).hex()}"
    try:
        deadline = time.monotonic() + 20
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline and registry.poll() is None, "the test registry did not start"
            time.sleep(0.1)
        dockerfile = f"FROM 127.0.0.1:5000/labctl/harness:dev\nLABEL labctl.test.copy={tag}\n"
        built = subprocess.run(
            ["docker", "build", "-q", "-t", tag, "-"], input=dockerfile, capture_output=True, text=True
        )
        assert built.returncode == 0, built.stderr
        pushed = subprocess.run(["docker", "push", tag], capture_output=True, text=True, timeout=120)
        assert pushed.returncode == 0, pushed.stderr
        facts = json.loads(subprocess.run(["docker", "image", "inspect", tag], capture_output=True, text=True).stdout)[
            0
        ]
        digest = next(d for d in facts["RepoDigests"] if d.startswith(tag.rsplit(":", 1)[0] + "@")).split("@")[1]
        yield f"{tag}@{digest}", facts["Id"], registry
    finally:
        registry.kill()
        registry.wait()
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
        copies = remote_docker("images", "-q", "--filter", f"label=labctl.test.copy={tag}").stdout.split()
        if copies:
            remote_docker("rmi", "-f", *sorted(set(copies)))


def test_up_copies_a_pinned_image_to_a_host_that_cannot_reach_its_registry(
    labb: dict, homes: list[Path], lab: Path, unreachable_image: tuple[str, str, subprocess.Popen[bytes]]
) -> None:
    pinned, image_id, registry = unreachable_image
    home = homes[0]
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"labb": labb}}))
    write_profile(lab, "copied", free_labb_port(), image=pinned)
    profile_file = lab / "engines" / "harness" / "profiles" / "copied.yaml"
    profile_file.write_text(yaml.safe_dump({**yaml.safe_load(profile_file.read_text()), "unpinned": False}))
    assert remote_docker("image", "inspect", image_id).returncode != 0, "labb must not have the image yet"

    refused = labctl(home, "--host", "labb", "up", "harness", "--profile", "copied", lab=lab)
    assert refused.code != 0 and "--copy-image" in refused.stderr, refused.stderr
    assert remote_names("labctl.profile=copied") == []

    up = labctl(home, "--host", "labb", "up", "harness", "--profile", "copied", "--copy-image", "--json", lab=lab)
    assert up.code == 0, up.stderr
    info = json.loads(up.stdout.strip().splitlines()[-1])
    record = json.loads((home / "runs" / info["run_id"] / "record.json").read_text())
    assert record["image"]["reference"] == pinned and record["image"]["image_id"] == image_id
    assert "registry's manifest" in record["image"]["copied"]
    part = record["prep"]["image_pull"]
    assert part["cached"] is False and part["bytes"] > 10 * 2**20 and "docker save | docker load" in part["detail"]
    serve = remote_names(f"labctl.run_id={info['run_id']}")
    assert len(serve) == 1
    ran = remote_docker("inspect", "--format", "{{.Image}}", serve[0]).stdout.strip()
    assert ran == image_id, "labb must run exactly the image the pinned digest names"
    reply = openai.OpenAI(base_url=info["base_url"], api_key="none", timeout=30).chat.completions.create(
        model=info["model"], messages=[{"role": "user", "content": "copied"}], max_tokens=4
    )
    assert reply.choices[0].message.content
    assert labctl(home, "down", info["run_id"], lab=lab).code == 0

    # Registry gone: the copy already on labb is found by its id (content-addressed), nothing is sent again.
    registry.kill()
    registry.wait()
    again = labctl(home, "--host", "labb", "up", "harness", "--profile", "copied", "--copy-image", "--json", lab=lab)
    assert again.code == 0, again.stderr
    second = json.loads(again.stdout.strip().splitlines()[-1])
    record = json.loads((home / "runs" / second["run_id"] / "record.json").read_text())
    assert record["prep"]["image_pull"]["cached"] is True and record["image"]["image_id"] == image_id
    assert "controller's Docker" in record["image"]["copied"]
    assert labctl(home, "down", second["run_id"], lab=lab).code == 0


def test_copy_image_needs_a_pinned_profile_and_a_remote_host(labb: dict, homes: list[Path], lab: Path) -> None:
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"labb": labb}}))
    write_profile(lab, "loose", free_labb_port())
    loose = labctl(
        homes[0], "--host", "labb", "up", "harness", "--profile", "loose", "--allow-unpinned", "--copy-image", lab=lab
    )
    assert loose.code == 2 and "pin" in loose.stderr and "Traceback" not in loose.stderr, loose.stderr
    local = labctl(homes[0], "up", "harness", "--profile", "loose", "--allow-unpinned", "--copy-image", lab=lab)
    assert local.code == 2 and "--host" in local.stderr, local.stderr
    assert not (homes[0] / "runs").is_dir() or not any((homes[0] / "runs").iterdir())


def test_pin_host_asks_for_that_hosts_platform(labb: dict, homes: list[Path], lab: Path) -> None:
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"labb": labb}}))
    write_profile(lab, "topin", free_labb_port())
    pinned = labctl(homes[0], "pin", "harness", "--profile", "topin", "--host", "labb", "--json", lab=lab)
    assert pinned.code == 0, pinned.stderr
    answer = json.loads(pinned.stdout)
    platform = json.loads(remote_docker("info", "--format", "{{json .}}").stdout)
    assert answer["platform"].startswith(f"{platform['OSType']}/")
    text = (lab / "engines" / "harness" / "profiles" / "topin.yaml").read_text()
    assert answer["digest"] in text and "unpinned" not in text


def test_up_refuses_a_port_that_a_process_labctl_did_not_start_holds_on_labb(
    labb: dict, homes: list[Path], lab: Path
) -> None:
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"labb": labb}}))
    port = free_labb_port()
    name = f"labctl-test-squatter-{os.urandom(4).hex()}"
    started = remote_docker(
        "run", "-d", "--name", name, "--network", "host", "--entrypoint", "python3",
        "127.0.0.1:5000/labctl/harness:dev", "-m", "http.server", str(port), "--bind", "127.0.0.1",
        timeout=120,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + 20
        while f"127.0.0.1:{port}" not in _labb_listeners() and time.monotonic() < deadline:
            time.sleep(0.2)
        write_profile(lab, "squatted", port)
        up = labctl(homes[0], "--host", "labb", "up", "harness", "--profile", "squatted", "--allow-unpinned", lab=lab)
        assert up.code == 3, up.stderr
        assert f"port {port} on labb is in use" in up.stderr and "labctl did not start" in up.stderr, up.stderr
        assert remote_names("labctl.profile=squatted") == []
        assert f"labctl-port-{port}" not in remote_docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    finally:
        remote_docker("rm", "-f", name)


def _labb_listeners() -> str:
    return subprocess.run(["ssh", SSH_TARGET, "ss", "-ltnH"], capture_output=True, text=True, timeout=20).stdout


@pytest.fixture
def hub_seen_from_labb(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackHub]:
    """The loopback Hub server, also at the same address on labb's own loopback: an SSH reverse forward (the
    test's stand-in for a GPU host's own route to the Hub)."""
    with loopback_hub() as hub:
        port = int(hub.endpoint.rsplit(":", 1)[1])
        reverse = subprocess.Popen(
            ["ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-R", f"127.0.0.1:{port}:127.0.0.1:{port}", SSH_TARGET],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            entry = HostEntry("labb", DOCKER_URL)
            deadline = time.monotonic() + 20
            while ("127.0.0.1", port) not in (listeners(entry) or set()):
                assert reverse.poll() is None and time.monotonic() < deadline, "the reverse forward did not open"
                time.sleep(0.2)
            monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
            monkeypatch.delenv("HF_TOKEN", raising=False)
            yield hub
        finally:
            reverse.terminate()
            reverse.wait(timeout=10)


def sim_lab_with_labb(tmp_path: Path, labb: dict) -> Path:
    """The simulated lab's persona profiles (pinned images, real model ids), with labb as a host."""
    sim = REPO / "build" / "sim-lab"
    if not (sim / "hosts.yaml").is_file():
        _missing("the simulated GPU lab's profiles (build/sim-lab) are absent: make sim-lab")
    lab = tmp_path / "lab"
    shutil.copytree(sim, lab, ignore=shutil.ignore_patterns("runs", ".state"))
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"labb": labb}}))
    return lab


def test_fetch_and_up_on_labb_put_the_model_into_labbs_cache(
    labb: dict, homes: list[Path], tmp_path: Path, hub_seen_from_labb: LoopbackHub
) -> None:
    lab, home, cache = sim_lab_with_labb(tmp_path, labb), homes[0], tmp_path / "labb-hf"
    model = "Qwen/Qwen2.5-7B-Instruct"  # the model of the simulated lab's vllm/qwen2.5-7b
    since = remote_docker("info", "--format", "{{.SystemTime}}").stdout.strip()

    full = labctl(home, "--host", "labb", "fetch", "vllm", "--profile", "qwen2.5-7b", "--cache-dir", str(cache),
                  "--json", lab=lab)  # fmt: skip
    assert full.code == 0, full.stderr
    fetched = json.loads(full.stdout.strip().splitlines()[-1])
    assert fetched["cached"] is False and fetched["received_bytes"] == fetched["total_bytes"] > 0
    assert hub_seen_from_labb.bytes_sent(model) == fetched["total_bytes"]
    assert f"into {cache} on labb" in full.stderr
    snapshot = cache / "hub" / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / fetched["commit"]
    assert (snapshot / "config.json").is_symlink()  # labb's disk is this machine's: its network is not
    ran: list[str] = []
    for _ in range(20):  # the daemon's event log may lag the container by a moment
        ran = remote_docker("events", "--since", since, "--until", "0s", "--filter", "label=labctl.fetch_client=true",
                            "--filter", "event=start", "--format", "{{.Actor.Attributes.name}}").stdout.split()  # fmt: skip
        if ran:
            break
        time.sleep(0.5)
    assert ran and all(name.startswith("labctl-fetch-") for name in ran), "the download ran on labb"
    assert not remote_names("labctl.fetch_client=true"), "the fetch container is gone"

    up = labctl(home, "--host", "labb", "up", "vllm", "--profile", "qwen2.5-7b", "--cache-dir", str(cache),
                "--port", str(free_labb_port()), "--json", lab=lab)  # fmt: skip
    assert up.code == 0, up.stderr
    info = json.loads(up.stdout.strip().splitlines()[-1])
    record = json.loads((home / "runs" / info["run_id"] / "record.json").read_text())
    assert record["prep"]["model_fetch"]["cached"] is True and record["prep"]["model_fetch"]["bytes"] == 0
    assert hub_seen_from_labb.bytes_sent(model) == fetched["total_bytes"], "a cached fetch downloads nothing"
    assert labctl(home, "down", info["run_id"], lab=lab).code == 0

    tight = labctl(home, "--host", "labb", "fetch", "vllm", "--profile", "qwen2.5-7b", "--cache-dir",
                   str(tmp_path / "empty-hf"), lab=lab, env={"LABCTL_DISK_RESERVE_GIB": "1000000"})  # fmt: skip
    assert tight.code == 2 and "not enough disk space on labb" in tight.stderr, tight.stderr
    colon = labctl(home, "--host", "labb", "fetch", "vllm", "--profile", "qwen2.5-7b", "--cache-dir",
                   f"{tmp_path}/a:/etc", lab=lab)  # fmt: skip
    assert colon.code == 2 and "may hold no ':'" in colon.stderr and "Traceback" not in colon.stderr, colon.stderr
    assert not (tmp_path / "empty-hf" / "hub").exists()


def test_a_host_without_the_registry_gets_the_client_image_from_the_controller(labb: dict, homes: list[Path]) -> None:
    """The bench client's image under a name no registry serves (labb cannot pull it): copied over Docker's
    transport, checked by image id, then the bench runs there."""
    source = os.environ.get("LABCTL_CLIENT_IMAGE") or "127.0.0.1:5000/labctl/harness:dev"
    local_only = f"labctl-test/client-{os.urandom(4).hex()}:dev"
    assert subprocess.run(["docker", "tag", source, local_only], capture_output=True).returncode == 0
    home = homes[0]
    try:
        up = labctl(home, "up", "harness", "--profile", "smoke", "--allow-unpinned", "--host", "labb", "--json",
                    "--port", str(free_labb_port()))  # fmt: skip
        assert up.code == 0, up.stderr
        run_id = json.loads(up.stdout.strip().splitlines()[-1])["run_id"]
        bench = labctl(home, "bench", "run", run_id, "--workload", "latency-probe", "--concurrency", "1",
                       "--requests", "3", "--json", env={"LABCTL_CLIENT_IMAGE": local_only})  # fmt: skip
        assert bench.code == 0, bench.stderr
        assert json.loads(bench.stdout)["client"]["container_image"] == local_only
        ids = [
            subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
            for cmd in (
                ["docker", "image", "inspect", "-f", "{{.Id}}", local_only],
                ["docker", "-H", DOCKER_URL, "image", "inspect", "-f", "{{.Id}}", local_only],
            )
        ]
        assert ids[0] and ids[0] == ids[1]
        assert labctl(home, "down", run_id).code == 0
    finally:
        subprocess.run(["docker", "rmi", local_only], capture_output=True)
        remote_docker("rmi", local_only)
