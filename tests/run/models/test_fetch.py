"""labctl fetch against a real Hub API server on loopback (tests/helpers/loopback_hub.py, reached through
HF_ENDPOINT): progress, a cached second fetch, resume after a killed fetch, a branch resolved to its
commit (and a branch that moved), gated and missing repositories, the disk-space refusal, and HF_TOKEN
kept out of everything labctl writes. No Docker, no internet: the CLI runs as a subprocess, as a user runs it."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers.loopback_hub import FIXTURES, GRANTED_TOKEN, HubRepo, LoopbackHub, loopback_hub, repo_from_folder
from helpers.support import LABCTL, REPO, Result

from labctl.run.records.acquired import Action, Kind, Ledger

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers

MODEL = "Qwen/Qwen3-32B"  # the model of engines/vllm/profiles/qwen3-32b.yaml (revision main)


def fetch(hub: LoopbackHub, cache: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    full = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    home = str(cache.parent / "home")  # its ledger line (gc reads it), never in the checkout
    full.update({"HF_ENDPOINT": hub.endpoint, "LABCTL_LAB": str(REPO), "LABCTL_HOME": home, **(env or {})})
    proc = subprocess.run(
        [*LABCTL, "fetch", "vllm", "--profile", "qwen3-32b", "--cache-dir", str(cache), *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        cwd=REPO,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def with_stand_in_blob(size: int) -> HubRepo:
    """The shipped Qwen3-32B stand-in plus one file of random bytes (not weights), so a fetch takes time."""
    repo = repo_from_folder(MODEL, FIXTURES / MODEL)
    repo.files["stand-in-shard.bin"] = os.urandom(size)
    repo.branches["main"] = repo.commit
    return repo


def folder(cache: Path) -> Path:
    return cache / "hub" / ("models--" + MODEL.replace("/", "--"))


def test_fetch_shows_progress_records_bytes_and_a_second_fetch_is_cached(tmp_path: Path) -> None:
    repo = with_stand_in_blob(3 << 20)
    with loopback_hub({MODEL: repo}, rate=8 << 20) as hub:
        first = fetch(hub, tmp_path / "hf", "--json")
        assert first.code == 0, first.stderr
        got = json.loads(first.stdout)
        total = sum(len(d) for d in repo.files.values())
        assert got["commit"] == repo.commit and got["total_bytes"] == total
        assert got["received_bytes"] == total == hub.bytes_sent(MODEL) and got["cached"] is False
        assert got["prep"]["bytes"] == total and got["prep"]["cached"] is False and got["prep"]["seconds"] > 0
        lines = first.stderr.splitlines()
        assert lines[0].startswith(f"fetching {MODEL}@main (commit {repo.commit}) from {hub.endpoint}")
        progress = [line for line in lines if line.startswith("fetch: ")]
        assert progress and "(100%)" in progress[-1] and "/s, ETA " in progress[-1], first.stderr
        snapshot = folder(tmp_path / "hf") / "snapshots" / repo.commit
        for name, data in repo.files.items():
            assert (snapshot / name).is_symlink() and (snapshot / name).read_bytes() == data

        second = fetch(hub, tmp_path / "hf", "--json")
        assert second.code == 0, second.stderr
        again = json.loads(second.stdout)
        assert again["cached"] is True and again["received_bytes"] == 0 and again["prep"]["cached"] is True
        assert hub.bytes_sent(MODEL) == total, "a cached fetch downloads nothing"
        assert "cached in" in second.stderr and "nothing to download" in second.stderr
        entries, problems = Ledger(tmp_path / "home").read()  # what labctl gc may offer: the first fetch only
        assert problems == [] and [(e.kind, e.action, e.folder) for e in entries] == [
            (Kind.MODEL, Action.FETCHED, str(snapshot)),
            (Kind.MODEL, Action.FOUND, str(snapshot)),
        ]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def kill_mid_download(hub: LoopbackHub, cache: Path) -> Path:
    """Start `labctl fetch`, SIGKILL it once the big file's partial holds 1 MiB (the user's kill -9, a closed
    laptop: nothing is cleaned up), and wait until the server noticed; returns the partial file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update({"HF_ENDPOINT": hub.endpoint, "LABCTL_LAB": str(REPO), "LABCTL_HOME": str(cache.parent / "home")})
    proc = subprocess.Popen(
        [*LABCTL, "fetch", "vllm", "--profile", "qwen3-32b", "--cache-dir", str(cache)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    blobs = folder(cache) / "blobs"
    deadline = time.monotonic() + 60
    partial: list[Path] = []
    while time.monotonic() < deadline:
        # the big file's partial: a small file's partial may be renamed (finished) between the glob and its stat
        partial = [p for p in (blobs.glob("*.incomplete") if blobs.is_dir() else []) if _size(p) >= 1 << 20]
        if partial:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert partial, "the fetch never started writing the big file"
    while not any(s.method == "GET" and s.path.endswith("/stand-in-shard.bin") for s in hub.served):
        time.sleep(0.05)  # the server notices the dead connection at its next write
    hub.rate = None
    return partial[0]


def test_a_killed_fetch_resumes_and_transfers_only_the_rest(tmp_path: Path) -> None:
    size = 6 << 20
    repo = with_stand_in_blob(size)
    blob = repo.files["stand-in-shard.bin"]
    cache = tmp_path / "hf"
    with loopback_hub({MODEL: repo}, rate=1 << 20) as hub:
        partial = kill_mid_download(hub, cache)
        have = partial.stat().st_size
        assert 0 < have < size
        blobs = folder(cache) / "blobs"
        complete = sum(p.stat().st_size for p in blobs.iterdir() if not p.name.endswith(".incomplete"))
        before = hub.bytes_sent(MODEL)
        second = fetch(hub, cache, "--json")
        assert second.code == 0, second.stderr
        got = json.loads(second.stdout)
        rest = sum(len(d) for d in repo.files.values()) - complete - have
        assert got["received_bytes"] == rest and hub.bytes_sent(MODEL) - before == rest
        assert f"resuming: {have / (1 << 20):.1f} MiB already here" in second.stderr
        ranged = [s for s in hub.served if s.path.endswith("/stand-in-shard.bin") and s.status == 206]
        assert ranged, "the second fetch asked for the rest with Range"
        done = folder(cache) / "snapshots" / repo.commit / "stand-in-shard.bin"
        assert hashlib.sha256(done.read_bytes()).digest() == hashlib.sha256(blob).digest()
        assert not list(blobs.glob("*.incomplete"))


def test_a_damaged_partial_file_is_caught_by_the_hash_and_fetched_whole_again(tmp_path: Path) -> None:
    repo = with_stand_in_blob(4 << 20)
    cache = tmp_path / "hf"
    with loopback_hub({MODEL: repo}, rate=1 << 20) as hub:
        partial = kill_mid_download(hub, cache)
        with open(partial, "r+b") as damaged:
            damaged.write(b"\0" * 4096)  # a bad sector, or another tool writing there
        refused = fetch(hub, cache)
        assert refused.code == 1 and "do not match the Hub's hash" in refused.stderr
        assert not partial.exists(), "the damaged partial file is deleted"
        blobs = folder(cache) / "blobs"
        complete = sum(p.stat().st_size for p in blobs.iterdir() if not p.name.endswith(".incomplete"))
        whole = fetch(hub, cache, "--json")
        assert whole.code == 0, whole.stderr
        assert json.loads(whole.stdout)["received_bytes"] == sum(len(d) for d in repo.files.values()) - complete
        assert "resuming" not in whole.stderr
        done = folder(cache) / "snapshots" / repo.commit / "stand-in-shard.bin"
        assert done.read_bytes() == repo.files["stand-in-shard.bin"]


def test_a_branch_resolves_to_its_commit_and_a_moved_branch_fetches_the_new_one(tmp_path: Path) -> None:
    repo = repo_from_folder(MODEL, FIXTURES / MODEL)
    with loopback_hub({MODEL: repo}) as hub:
        first = json.loads(fetch(hub, tmp_path / "hf", "--json").stdout)
        assert first["revision"] == "main" and first["commit"] == repo.commit
        refs = folder(tmp_path / "hf") / "refs" / "main"
        assert refs.read_text() == repo.commit
        assert f"main -> {repo.commit}" in first["prep"]["detail"]
        old = repo.commit
        repo.files["README.md"] += b"\nA new commit on main.\n"
        repo.branches["main"] = repo.commit
        moved = fetch(hub, tmp_path / "hf", "--json")
        assert moved.code == 0, moved.stderr
        got = json.loads(moved.stdout)
        assert got["commit"] == repo.commit != old and refs.read_text() == repo.commit
        assert got["cached"] is False and got["received_bytes"] == len(repo.files["README.md"])


def test_missing_and_gated_repositories_fail_in_one_line_with_nothing_fetched(tmp_path: Path) -> None:
    with loopback_hub({}) as hub:
        missing = fetch(hub, tmp_path / "hf")
    assert missing.code == 2 and missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.startswith(f"Error: {MODEL} does not exist on the Hub at {hub.endpoint}")
    assert "check model.id and model.revision in engines/vllm/profiles/qwen3-32b.yaml" in missing.stderr

    gated = repo_from_folder(MODEL, FIXTURES / MODEL, gated=True)
    with loopback_hub({MODEL: gated}) as hub:
        anonymous = fetch(hub, tmp_path / "hf")
        wrong = fetch(hub, tmp_path / "hf", env={"HF_TOKEN": "hf_not_granted_0000"})
        assert hub.bytes_sent(MODEL) == 0
    assert anonymous.code == 2 and "is gated on the Hub" in anonymous.stderr and "HTTP 401" in anonymous.stderr
    assert wrong.code == 2 and "HTTP 403: HF_TOKEN's account has not been granted access" in wrong.stderr
    assert "export HF_TOKEN=" in wrong.stderr and "hf_not_granted_0000" not in wrong.stderr
    assert not (folder(tmp_path / "hf") / "snapshots").exists()

    offline = fetch(hub, tmp_path / "hf", env={"HF_HUB_OFFLINE": "1"})
    assert offline.code == 2 and "HF_HUB_OFFLINE is set in this shell" in offline.stderr

    with loopback_hub({}) as hub:
        pass  # closed: nobody listens at its address any more
    unreachable = fetch(hub, tmp_path / "hf")
    assert unreachable.code == 1 and f"cannot reach the Hub at {hub.endpoint}" in unreachable.stderr


def test_a_granted_token_fetches_a_gated_model_and_is_written_nowhere(tmp_path: Path) -> None:
    gated = repo_from_folder(MODEL, FIXTURES / MODEL, gated=True)
    cache = tmp_path / "hf"
    with loopback_hub({MODEL: gated}) as hub:
        result = fetch(hub, cache, "--json", env={"HF_TOKEN": GRANTED_TOKEN})
        assert result.code == 0, result.stderr
        assert all(s.authorized for s in hub.served if "/resolve/" in s.path)
    assert GRANTED_TOKEN not in result.stdout + result.stderr
    for path in cache.rglob("*"):
        if path.is_file():
            assert GRANTED_TOKEN.encode() not in path.read_bytes(), path


def test_too_little_disk_space_is_refused_with_the_numbers_before_any_download(tmp_path: Path) -> None:
    repo = repo_from_folder(MODEL, FIXTURES / MODEL)
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    repo.claimed["stand-in-shard.bin"] = free + (2 << 30)  # the Hub says it is bigger than this disk
    repo.files["stand-in-shard.bin"] = b"x"
    repo.branches["main"] = repo.commit
    with loopback_hub({MODEL: repo}) as hub:
        result = fetch(hub, tmp_path / "hf")
        assert hub.bytes_sent(MODEL) == 0
    assert result.code == 2 and "Traceback" not in result.stderr
    assert f"Error: not enough disk space for fetching {MODEL}@main: need " in result.stderr
    assert f"GiB free at {tmp_path}." in result.stderr and result.stderr.rstrip().endswith("Nothing was started.")


@pytest.mark.parametrize("engine", ["harness"])
def test_an_engine_without_a_model_cache_has_nothing_to_fetch(tmp_path: Path, engine: str) -> None:
    proc = subprocess.run(
        [*LABCTL, "fetch", engine, "--profile", "smoke", "--cache-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "LABCTL_LAB": str(REPO)},
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2 and "there is nothing to fetch" in proc.stderr


def test_on_a_terminal_progress_is_one_line_rewritten_in_place(tmp_path: Path) -> None:
    import pty

    repo = with_stand_in_blob(2 << 20)
    with loopback_hub({MODEL: repo}, rate=1 << 20) as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update({"HF_ENDPOINT": hub.endpoint, "LABCTL_LAB": str(REPO), "LABCTL_HOME": str(tmp_path / "home")})
        leader, follower = pty.openpty()
        proc = subprocess.Popen(
            [*LABCTL, "fetch", "vllm", "--profile", "qwen3-32b", "--cache-dir", str(tmp_path / "hf")],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=follower,
        )
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=60) == 0
        os.close(leader)
    rewrites = seen.count(b"\r\x1b[Kfetch: ")
    assert rewrites >= 3, seen[-400:]  # bytes, rate and ETA refreshed several times a second
    assert b"/s, ETA " in seen and b"fetched 2.0 MiB" in seen


def test_two_fetches_of_one_model_at_once_both_succeed(tmp_path: Path) -> None:
    """Two `up`s of one profile fetch at the same time: they share the cache, never a partial or temporary file."""
    repo = with_stand_in_blob(2 << 20)
    with loopback_hub({MODEL: repo}, rate=4 << 20) as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update({"HF_ENDPOINT": hub.endpoint, "LABCTL_LAB": str(REPO), "LABCTL_HOME": str(tmp_path / "home")})
        argv = [*LABCTL, "fetch", "vllm", "--profile", "qwen3-32b", "--cache-dir", str(tmp_path / "hf"), "--json"]
        procs = [
            subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in "ab"
        ]
        outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err.decode() for _, err in outs]
    got = [json.loads(out) for out, _ in outs]
    assert {g["commit"] for g in got} == {repo.commit}
    snapshot = folder(tmp_path / "hf") / "snapshots" / repo.commit
    assert all((snapshot / name).read_bytes() == data for name, data in repo.files.items())
    assert not [p for p in folder(tmp_path / "hf").rglob("*") if p.name.endswith((".labctl-tmp", ".incomplete"))]
