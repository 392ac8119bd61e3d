"""Resident deployments on a real Docker Engine with the harness engine: keys, restarts, ownership,
rotation, and the key never leaking."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import openai
import pytest
from helpers.harness_proc import free_port, wait_healthy
from helpers.lifecycle_helpers import containers_of, labctl, record, up, write_profile
from helpers.support import REPO

pytestmark = pytest.mark.docker


def start_resident(lab: Path, home: Path, *args: str) -> tuple[dict, str, str]:
    port = free_port()
    write_profile(lab, "res", port)
    result = up(lab, home, "res", "--resident", *args)
    assert result.code == 0, result.stderr
    info = json.loads(result.stdout)
    share = labctl(lab, home, "share", info["run_id"], "--json")
    assert share.code == 0, share.stderr
    key = json.loads(share.stdout)["api_key"]
    return info, key, f"http://127.0.0.1:{port}"


def client(info: dict, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=info["base_url"], api_key=key, max_retries=0)


def ask(info: dict, key: str) -> str:
    return (
        client(info, key)
        .chat.completions.create(model=info["model"], messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        .choices[0]
        .message.content
    )


def test_keys_enforced_and_never_leaked(lab: Path, home: Path) -> None:
    info, key, url = start_resident(lab, home, "--owner", "alice")
    with pytest.raises(openai.AuthenticationError):
        ask(info, "sk-wrong-key-000000000000")
    assert ask(info, key)
    outputs = [
        labctl(lab, home, *args)
        for args in (
            ("status",),
            ("status", "--json"),
            ("show", info["run_id"]),
            ("show", info["run_id"], "--json"),
            ("runs",),
            ("export", info["run_id"]),
            ("logs", info["run_id"]),
        )
    ]
    assert all(key not in o.stdout + o.stderr for o in outputs)
    assert key in labctl(lab, home, "share", info["run_id"]).stdout  # the one place it is shown
    for path in list((home / "runs").rglob("*")) + list((REPO / "compose").glob("*")):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path
    inspect = subprocess.run(
        ["docker", "inspect", *containers_of(info["run_id"])], capture_output=True, text=True
    ).stdout
    assert key not in inspect
    rec = record(home, info["run_id"])
    assert rec["resident"]["restart_policy"] == "unless-stopped" and rec["resident"]["keys"] == 1
    assert rec["resident"]["key_fingerprints"][0].startswith("sha256:")
    key_path = home / ".state" / "keys" / info["run_id"] / "api_key"
    assert oct(key_path.stat().st_mode & 0o777) == "0o600"


def test_engine_killed_is_restarted_and_counted(lab: Path, home: Path) -> None:
    info, key, url = start_resident(lab, home)
    container = containers_of(info["run_id"])[0]
    pid = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Pid}}", container], capture_output=True, text=True
    ).stdout.strip()
    os.kill(int(pid), 9)
    time.sleep(0.5)
    wait_healthy(url)
    assert ask(info, key)
    status = json.loads(labctl(lab, home, "status", "--json").stdout)
    mine = next(s for s in status if s["run_id"] == info["run_id"])
    assert mine["restarts"] >= 1 and mine["health"] == "healthy" and mine["resident"]
    events = [
        json.loads(x)["event"] for x in (home / "runs" / info["run_id"] / "events.jsonl").read_text().splitlines()
    ]
    assert "restart" in events


def test_down_of_another_owners_deployment_needs_force_and_reason(lab: Path, home: Path) -> None:
    info, _, _ = start_resident(lab, home, "--owner", "alice")
    refused = labctl(lab, home, "down", info["run_id"])
    assert refused.code == 2
    assert f"run {info['run_id']} is alice's resident deployment: stopping it needs --force --reason" in refused.stderr
    assert containers_of(info["run_id"])
    assert labctl(lab, home, "down", info["run_id"], "--force").code == 2  # a reason is required too
    done = labctl(lab, home, "down", info["run_id"], "--force", "--reason", "GPU needed for the nightly run")
    assert done.code == 0, done.stderr
    rec = record(home, info["run_id"])
    assert rec["stop_forced"] is True and rec["stop_reason"] == "GPU needed for the nightly run"
    assert not (home / ".state" / "keys" / info["run_id"]).exists()


def test_key_rotation(lab: Path, home: Path) -> None:
    info, old, _ = start_resident(lab, home)
    result = labctl(lab, home, "rotate-key", info["run_id"])
    assert result.code == 0, result.stderr
    new = json.loads(labctl(lab, home, "share", info["run_id"], "--json").stdout)["api_key"]
    assert new != old and new not in result.stdout
    with pytest.raises(openai.AuthenticationError):
        ask(info, old)
    assert ask(info, new)
    events = [json.loads(x) for x in (home / "runs" / info["run_id"] / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "key rotation" and e["key_fingerprints"][0].startswith("sha256:") for e in events)


def test_several_keys_and_key_file(lab: Path, home: Path, tmp_path: Path) -> None:
    key_file = tmp_path / "keys.txt"
    key_file.write_text("sk-team-a-0123456789abcdef\nsk-team-b-0123456789abcdef\n")
    key_file.chmod(0o600)
    info, first, _ = start_resident(lab, home, "--key-file", str(key_file))
    assert first == "sk-team-a-0123456789abcdef"
    assert ask(info, "sk-team-b-0123456789abcdef")


def main_dockerd() -> int | None:
    """The pid of the lab's main daemon when scripts/docker-lab.sh started it (its default pid file, no
    --data-root): the simulated-GPU and remote-lab daemons beside it must not be touched."""
    try:
        pid = int(Path("/var/run/docker.pid").read_text().strip())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    ours = b"--bridge=none" in argv and not any(a.startswith(b"--data-root") for a in argv)
    return pid if ours else None


@pytest.mark.exclusive  # every other Docker test would lose its daemon for a while
def test_comes_back_after_dockerd_restart(lab: Path, home: Path) -> None:
    pid = main_dockerd()
    if pid is None:
        pytest.skip("dockerd was not started by scripts/docker-lab.sh: not restarting someone else's daemon")
    info, key, url = start_resident(lab, home)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists():
        assert time.monotonic() < deadline, "dockerd did not stop"
        time.sleep(0.2)
    subprocess.run(["bash", str(REPO / "scripts" / "docker-lab.sh")], check=True, capture_output=True)
    wait_healthy(url, 90)
    assert ask(info, key)
    status = json.loads(labctl(lab, home, "status", "--json").stdout)
    assert any(s["run_id"] == info["run_id"] and s["health"] == "healthy" for s in status)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--key-file", "/nonexistent/keys"), "--key-file /nonexistent/keys: no such file."),
        (("--bind", "localhost-ish"), "--bind 'localhost-ish' is not an IP address"),
        (("--keys", "2", "--key-file", "x"), "give either --key-file FILE or --keys N, not both."),
    ],
)
def test_bad_resident_input(lab: Path, home: Path, args: tuple[str, ...], message: str) -> None:
    write_profile(lab, "bad", free_port())
    result = up(lab, home, "bad", "--resident", *args)
    assert result.code == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert not (home / "runs").exists()


def test_bad_key_files(lab: Path, home: Path, tmp_path: Path) -> None:
    write_profile(lab, "bad", free_port())
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    result = up(lab, home, "bad", "--resident", "--key-file", str(empty))
    assert result.code == 2 and "the file is empty" in result.stderr
    open_file = tmp_path / "open"
    open_file.write_text("sk-0123456789abcdefgh\n")
    open_file.chmod(0o644)
    result = up(lab, home, "bad", "--resident", "--key-file", str(open_file))
    assert (
        result.code == 2 and f"readable by other users (mode 0644). Fix it with: chmod 600 {open_file}" in result.stderr
    )
    assert not (home / "runs").exists()


def test_trtllm_resident_beyond_loopback_needs_allow_no_auth(lab: Path, home: Path) -> None:
    result = labctl(
        lab, home, "up", "trtllm", "--profile", "qwen3-32b", "--allow-unpinned", "--resident", "--bind", "0.0.0.0"
    )
    assert result.code == 2
    assert "trtllm cannot check API keys" in result.stderr and "--allow-no-auth" in result.stderr


def test_replace_does_not_stop_another_owners_resident_deployment(lab: Path, home: Path) -> None:
    port = free_port()  # a held port; the GPU version runs on the simulated GPU lab (test_sim_profiles.py)
    write_profile(lab, "held", port)
    held = up(lab, home, "held", "--resident", "--owner", "alice")
    assert held.code == 0, held.stderr
    run_id = json.loads(held.stdout)["run_id"]
    write_profile(lab, "taker", port)
    result = up(lab, home, "taker", "--replace")
    assert result.code == 3
    assert f"--replace will not stop harness/held (run {run_id}, owner alice" in result.stderr
    posing = up(lab, home, "taker", "--replace", "--owner", "alice")  # --owner names the new run's owner, not you
    assert posing.code == 3 and f"--replace will not stop harness/held (run {run_id}" in posing.stderr
    assert containers_of(run_id)
