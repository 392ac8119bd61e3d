"""Resident deployments on the remote lab host `labb` (`make remote-lab`), reached only over Docker's ssh://
transport: the keys cross in a named volume filled through that transport, the engine binds the address the
user names (10.201.0.2, inside the namespace the project's own script creates) or labb's loopback, and
`share` says what a colleague needs for either. Only loopback and 10.201.0.2 are used."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from helpers.lifecycle_helpers import IMAGE, write_profile
from helpers.support import (
    LABB_ADDRESS,
    LABB_SOCKET,
    LABCTL,
    Result,
    free_labb_port,
    labb_entry,
    remote_docker,
    remote_names,
    remove_labb_runs,
    run_labctl,
)

pytestmark = [pytest.mark.docker, pytest.mark.lab, pytest.mark.labb]  # labb's own tier: one test at a time


@pytest.fixture(scope="module")
def labb() -> dict:
    return labb_entry()


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """This controller's home; whatever its runs left on labb (containers, claims, key volumes, forwards)
    is removed afterwards."""
    folder = tmp_path / "home"
    folder.mkdir()
    yield folder
    remove_labb_runs(folder)


@pytest.fixture
def lab(lab: Path, labb: dict) -> Path:
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"labb": labb}}))
    return lab


def labctl(lab: Path, home: Path, *args: str, timeout: float = 180) -> Result:
    return run_labctl(*args, lab=lab, env={"LABCTL_HOME": str(home), "LABCTL_LOCK_FILE": str(home / "gpus.lock")})


def up_resident(lab: Path, home: Path, port: int, *args: str) -> dict:
    write_profile(lab, "res", port)
    result = labctl(lab, home, "up", "harness", "--profile", "res", "--allow-unpinned", "--host", "labb", "--json",
                    "--resident", *args)  # fmt: skip
    assert result.code == 0, result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def share(lab: Path, home: Path, run_id: str) -> dict:
    result = labctl(lab, home, "share", run_id, "--json")
    assert result.code == 0, result.stderr
    return dict(json.loads(result.stdout))


def ask(base_url: str, model: str, key: str) -> str:
    client = openai.OpenAI(base_url=base_url, api_key=key, timeout=30, max_retries=0)
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    return str(reply.choices[0].message.content)


def key_volumes(run_id: str) -> list[str]:
    listed = remote_docker("volume", "ls", "-q", "--filter", f"label=labctl.keys_of={run_id}")
    return listed.stdout.split()


def test_resident_bound_to_a_named_address_on_labb_keys_rotation_and_down(lab: Path, home: Path) -> None:
    port = free_labb_port()
    info = up_resident(lab, home, port, "--bind", LABB_ADDRESS)
    run_id, model = info["run_id"], info["model"]
    access = share(lab, home, run_id)
    direct = f"http://{LABB_ADDRESS}:{port}/v1"
    assert access["base_url"] == direct and access["ssh_forward"] is None and access["host"] == "labb", access
    key = access["api_key"]

    assert ask(direct, model, key)  # a colleague's client, straight at the address the run binds on labb
    assert ask(info["base_url"], model, key)  # labctl's own forward reaches that address too
    assert httpx.get(f"{direct}/models", timeout=10).status_code == 401  # no key at all
    with pytest.raises(openai.AuthenticationError):
        ask(direct, model, "sk-wrong-key-000000000000")

    # The keys crossed in a volume on labb, readable there by the engine image's user alone.
    volume = f"labctl-keys-{run_id}"
    assert key_volumes(run_id) == [volume]
    record_file = home / "runs" / run_id / "record.json"
    record = json.loads(record_file.read_text())
    assert record["resident"]["auth_volume"] == volume and record["endpoint"]["host"] == LABB_ADDRESS
    mountpoint = Path(remote_docker("volume", "inspect", "-f", "{{.Mountpoint}}", volume).stdout.strip())
    stat = (mountpoint / "api_key").stat()  # labb's dockerd keeps its data root on this machine
    user = remote_docker("image", "inspect", "-f", "{{.Config.User}}", record["image"]["image_id"]).stdout.strip()
    assert f"{stat.st_uid}:{stat.st_gid}" == user and oct(stat.st_mode & 0o777) == "0o400"
    assert (mountpoint / "api_key").read_text().splitlines() == [key]
    serve = remote_names(f"labctl.run_id={run_id}")
    mounts = json.loads(remote_docker("inspect", "-f", "{{json .Mounts}}", *serve).stdout)
    assert [(m["Type"], m["Name"], m["Destination"], m["RW"]) for m in mounts] == [
        ("volume", volume, "/run/labctl", False)
    ]
    claim = remote_docker("inspect", "-f", '{{index .Config.Labels "labctl.claim.what"}}', f"labctl-port-{port}")
    assert claim.stdout.strip() == f"port {port} on {LABB_ADDRESS}"

    # bench runs its client on labb, at the named address, with the key (fed on its stdin, never in argv).
    bench = labctl(lab, home, "bench", "run", run_id, "--workload", "latency-probe", "--concurrency", "1",
                   "--requests", "3", "--json")  # fmt: skip
    assert bench.code == 0, bench.stderr
    result = json.loads(bench.stdout)
    assert result["status"] == "complete" and result["levels"][0]["completed"] == 3, result["levels"]
    assert result["target"]["base_url"] == direct and result["client"]["ran_on"] == "labb"

    # The key is nowhere but the volume, the controller's key store and `share` (bench results included).
    seen = [remote_docker("inspect", *serve).stdout, remote_docker("logs", *serve).stdout, bench.stdout, bench.stderr]
    seen += [p.read_text(errors="replace") for p in (home / "runs" / run_id).rglob("*") if p.is_file()]
    for args in (("status", "--json"), ("show", run_id), ("logs", run_id), ("export", run_id)):
        shown = labctl(lab, home, *args)
        seen += [shown.stdout, shown.stderr]
    assert all(key not in text for text in seen)
    assert {p.name for p in (home / "runs" / run_id).iterdir()} >= {"compose.yaml", "events.jsonl", "record.json"}

    rotated = labctl(lab, home, "rotate-key", run_id)
    assert rotated.code == 0, rotated.stderr
    new = share(lab, home, run_id)["api_key"]
    assert new != key and new not in rotated.stdout + rotated.stderr
    assert ask(direct, model, new)
    with pytest.raises(openai.AuthenticationError):
        ask(direct, model, key)
    assert (mountpoint / "api_key").read_text().splitlines() == [new]
    assert oct((mountpoint / "api_key").stat().st_mode & 0o777) == "0o400"

    down = labctl(lab, home, "down", run_id)
    assert down.code == 0, down.stderr
    assert remote_names(f"labctl.run_id={run_id}") == [] and remote_names(f"labctl.claim.run_id={run_id}") == []
    assert key_volumes(run_id) == [] and not (home / ".state" / "keys" / run_id).exists()
    events = [json.loads(line)["event"] for line in (home / "runs" / run_id / "events.jsonl").read_text().splitlines()]
    assert {"key rotation", "key volume removed", "claims released", "forward closed"} <= set(events)
    with pytest.raises(openai.APIConnectionError):
        openai.OpenAI(base_url=direct, api_key=new, timeout=5, max_retries=0).models.list()


def local_port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_loopback_resident_on_labb_is_shared_as_the_ssh_forward_a_colleague_runs(lab: Path, home: Path) -> None:
    port = free_labb_port()
    while not local_port_free(port):  # the colleague's forward listens on this machine's port of that number
        port = free_labb_port()
    info = up_resident(lab, home, port)
    access = share(lab, home, info["run_id"])
    assert access["base_url"] == f"http://127.0.0.1:{port}/v1" != info["base_url"]
    assert access["ssh_forward"] == f"ssh -N -L 127.0.0.1:{port}:127.0.0.1:{port} labctl-remote@{LABB_ADDRESS}"
    text = labctl(lab, home, "share", info["run_id"])
    assert access["ssh_forward"] in text.stdout and access["api_key"] in text.stdout

    with pytest.raises(openai.APIConnectionError):  # nothing listens on labb's address: it binds loopback there
        openai.OpenAI(base_url=f"http://{LABB_ADDRESS}:{port}/v1", api_key="x", timeout=5, max_retries=0).models.list()
    colleague = subprocess.Popen(
        shlex.split(access["ssh_forward"]), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 20
        while local_port_free(port):
            assert time.monotonic() < deadline and colleague.poll() is None, colleague.stderr
            time.sleep(0.1)
        assert ask(access["base_url"], info["model"], access["api_key"])
        assert httpx.get(f"{access['base_url']}/models", timeout=10).status_code == 401
    finally:
        colleague.terminate()
        colleague.wait(10)
    assert labctl(lab, home, "down", info["run_id"]).code == 0
    assert key_volumes(info["run_id"]) == []


def test_keys_fail_closed_on_labb_and_a_failed_or_interrupted_up_leaves_no_key_volume(lab: Path, home: Path) -> None:
    # An engine definition whose key variable the engine does not read: it serves everyone. up must notice
    # through the forward and take it down, keys and all.
    engine_file = lab / "engines" / "harness" / "engine.yaml"
    engine = yaml.safe_load(engine_file.read_text())
    engine["auth"]["env"] = "NOT_THE_HARNESS_KEY"
    engine_file.write_text(yaml.safe_dump(engine, sort_keys=False))
    port = free_labb_port()
    write_profile(lab, "open", port)
    result = labctl(lab, home, "up", "harness", "--profile", "open", "--allow-unpinned", "--host", "labb",
                    "--resident", "--bind", LABB_ADDRESS)  # fmt: skip
    assert result.code == 1 and "answered GET /v1/models without a key (HTTP 200)" in result.stderr, result.stderr
    (run_id,) = [p.name for p in (home / "runs").iterdir()]
    assert json.loads((home / "runs" / run_id / "record.json").read_text())["status"] == "failed"
    assert remote_names(f"labctl.run_id={run_id}") == [] and remote_names(f"labctl.claim.run_id={run_id}") == []
    assert key_volumes(run_id) == [] and not (home / ".state" / "keys" / run_id).exists()

    # Ctrl-C while the engine warms up: what up made on labb goes, the key volume with it.
    engine["auth"]["env"] = "LABCTL_HARNESS_API_KEY"
    engine_file.write_text(yaml.safe_dump(engine, sort_keys=False))
    write_profile(lab, "slow", free_labb_port(), extra=["--cold-start", "60"])
    proc = subprocess.Popen(
        [*LABCTL, "up", "harness", "--profile", "slow", "--allow-unpinned", "--host", "labb", "--resident"],
        cwd=lab,
        env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home), "LABCTL_LOCK_FILE": str(home / "l")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    slow = ""
    while not slow or not remote_names(f"labctl.run_id={slow}"):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        slow = next((p.name for p in (home / "runs").iterdir() if p.name != run_id), "")
        time.sleep(0.2)
    assert key_volumes(slow) == [f"labctl-keys-{slow}"]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert (
        proc.returncode != 0 and json.loads((home / "runs" / slow / "record.json").read_text())["status"] == "aborted"
    )
    assert remote_names(f"labctl.run_id={slow}") == [] and remote_names(f"labctl.claim.run_id={slow}") == [], err
    assert key_volumes(slow) == [] and not (home / ".state" / "keys" / slow).exists()


def test_a_resident_up_on_labb_at_an_address_it_lacks_or_a_port_another_process_holds_leaves_nothing(
    lab: Path, home: Path
) -> None:
    port = free_labb_port()
    write_profile(lab, "res", port)
    absent = labctl(lab, home, "up", "harness", "--profile", "res", "--allow-unpinned", "--host", "labb",
                    "--resident", "--bind", "10.201.0.9")  # fmt: skip
    assert absent.code == 1 and "cannot assign requested address" in absent.stderr.lower(), absent.stderr

    # A process labctl did not start (no labels, no claim) listens on labb's named address at that port.
    foreign = f"remoteresident-foreign-{port}"
    started = remote_docker("run", "-d", "--rm", "--name", foreign, "--network", "host", "--entrypoint", "python3",
                            IMAGE, "-m", "http.server", str(port), "--bind", LABB_ADDRESS)  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + 30
        while "Serving HTTP" not in remote_docker("logs", foreign).stderr + remote_docker("logs", foreign).stdout:
            assert time.monotonic() < deadline, remote_docker("logs", foreign).stderr
            time.sleep(0.2)
        held = labctl(lab, home, "up", "harness", "--profile", "res", "--allow-unpinned", "--host", "labb",
                      "--resident", "--bind", LABB_ADDRESS)  # fmt: skip
        assert held.code == 3, held.stderr
        assert f"({LABB_ADDRESS}:{port}) by a process labctl did not start" in held.stderr, held.stderr
    finally:
        remote_docker("rm", "-f", foreign)
    run_ids = [p.name for p in (home / "runs").iterdir()] if (home / "runs").is_dir() else []
    assert run_ids, "the failed up left its record"
    for run_id in run_ids:
        assert remote_names(f"labctl.run_id={run_id}") == [] and remote_names(f"labctl.claim.run_id={run_id}") == []
        assert key_volumes(run_id) == [] and not (home / ".state" / "keys" / run_id).exists()


def test_status_removes_a_key_volume_whose_run_left_nothing_else_on_labb(lab: Path, home: Path) -> None:
    """What an `up` SIGKILLed between writing its keys and starting leaves once its claims were reconciled."""
    run_id = "20261203-000000-00dead"
    made = remote_docker("volume", "create", "--label", f"labctl.keys_of={run_id}", f"labctl-keys-{run_id}")
    assert made.returncode == 0, made.stderr
    try:
        status = labctl(lab, home, "status", "--host", "labb")
        assert status.code == 0, status.stderr
        assert f"removed the key volume labctl-keys-{run_id} of run {run_id}" in status.stderr
        assert key_volumes(run_id) == []
    finally:
        remote_docker("volume", "rm", "-f", f"labctl-keys-{run_id}")


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for(condition: Callable[[], Any], seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        assert time.monotonic() < deadline, f"not within {seconds} s"
        time.sleep(0.5)
    return found


def test_a_resident_run_on_labb_gets_a_watcher_there_that_records_restarts_and_hangs(
    lab: Path, home: Path, labb: dict
) -> None:
    """The watcher runs on labb, mounting labb's own daemon socket (the host entry's `socket:`), its files in
    a volume there; `status` reads what it recorded back into the run's events log here."""
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"labb": {**labb, "socket": str(LABB_SOCKET)}}}))
    engine_file = lab / "engines" / "harness" / "engine.yaml"
    engine = yaml.safe_load(engine_file.read_text())
    engine["readiness"].update(watch_interval_s=0.5, hung_after_failures=3, probe_timeout_s=1)
    engine_file.write_text(yaml.safe_dump(engine, sort_keys=False))
    info = up_resident(lab, home, free_labb_port(), "--bind", LABB_ADDRESS)
    run_id = info["run_id"]
    record = json.loads((home / "runs" / run_id / "record.json").read_text())
    watcher = f"labctl-watch-{run_id}"
    assert record["resident"]["watcher"] == watcher and record["resident"]["watcher_note"] is None, record
    assert remote_names(f"labctl.watch_of={run_id}") == [watcher]
    mounts = json.loads(remote_docker("inspect", "-f", "{{json .Mounts}}", watcher).stdout)
    assert {(m["Type"], m.get("Name") or m["Source"], m["Destination"]) for m in mounts} == {
        ("bind", str(LABB_SOCKET), "/var/run/docker.sock"),
        ("volume", watcher, "/labctl-run"),
    }

    def recorded(kind: str) -> list[dict]:
        labctl(lab, home, "status", "--host", "labb")
        lines = (home / "runs" / run_id / "events.jsonl").read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["event"] == kind]

    def engine_pid() -> int:  # labb's dockerd shares this machine's process namespace
        serve = remote_names(f"labctl.run_id={run_id}")
        return int(remote_docker("inspect", "-f", "{{.State.Pid}}", *serve).stdout.strip())

    os.kill(engine_pid(), signal.SIGKILL)
    restart = wait_for(lambda: recorded("restart"), 60)
    assert restart[0]["seen_by"] == "labctl-watch" and restart[0]["exit_code"] == 137, restart
    health = f"http://{LABB_ADDRESS}:{record['endpoint']['port']}/health"
    wait_for(lambda: answers(health), 60)  # answered healthy again: a hang counts from here

    os.kill(engine_pid(), signal.SIGSTOP)  # alive, answering nothing: hung
    hung = wait_for(lambda: recorded("hung-restart"), 90)
    assert "failed 3 times in a row" in hung[0]["reason"] and hung[0]["by"] == "labctl-watch", hung
    shown = labctl(lab, home, "show", run_id)  # no --host: the record names labb
    assert f"watcher            {watcher}" in shown.stdout and "(last: hung-restart" in shown.stdout, shown.stdout

    down = labctl(lab, home, "down", run_id)
    assert down.code == 0, down.stderr
    assert remote_names(f"labctl.watch_of={run_id}") == []
    assert remote_docker("volume", "ls", "-q", "--filter", f"name={watcher}").stdout.split() == []


def test_a_watcher_never_watches_another_daemon_through_a_wrong_socket(lab: Path, home: Path, labb: dict) -> None:
    """/var/run/docker.sock on labb (the default) is this machine's main daemon, not labb's: refused."""
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"labb": {**labb, "socket": "/var/run/docker.sock"}}}))
    info = up_resident(lab, home, free_labb_port())
    record = json.loads((home / "runs" / info["run_id"] / "record.json").read_text())
    assert record["resident"]["watcher"] == "", record["resident"]
    assert "/var/run/docker.sock there is daemon" in record["resident"]["watcher_note"]
    assert "not the one labctl drives" in record["resident"]["watcher_note"]
    assert remote_names(f"labctl.watch_of={info['run_id']}") == []
    assert remote_docker("volume", "ls", "-q", "--filter", f"name=labctl-watch-{info['run_id']}").stdout.split() == []
    assert labctl(lab, home, "down", info["run_id"]).code == 0
