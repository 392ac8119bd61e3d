"""A second Unix user runs the real flows: `labtest2` (a member of the docker group, no root) drives labctl
from Debian's /usr/bin/python3 in a venv every user can read (scripts/user-venv.sh, cached under
/var/cache/labctl/user-venv), with this checkout's code first on its path. It starts the harness engine,
plain and resident, reaches it with the official `openai` SDK, rotates its key and takes it down; and the
owner rule holds between root and labtest2 in a home both use."""

from __future__ import annotations

import grp
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest
from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import IMAGE, containers_of, remove_runs, watchers_of, write_profile
from helpers.support import IN_CI, REPO, Result, ensure_second_user, run_labctl

pytestmark = pytest.mark.docker
USER = "labtest2"
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"


@pytest.fixture(scope="module")
def user_python() -> str:
    ensure_second_user(USER)
    built = subprocess.run(["bash", str(REPO / "scripts" / "user-venv.sh")], capture_output=True, text=True)
    if built.returncode != 0:
        reason = f"scripts/user-venv.sh could not build a venv every user can run: {built.stderr.strip()[-300:]}"
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(f"SKIPPED LOUDLY: {reason}; run `make test-deps` (python3-venv)")
    return built.stdout.strip() + "/bin/python"


@pytest.fixture
def shared(lab: Path, docker_engine: None) -> Iterator[Path]:
    """A folder both users reach (like /tmp): the lab copy, the host lock and the homes live in it."""
    folder = Path(tempfile.mkdtemp(prefix="labctl-users-", dir="/tmp"))
    folder.chmod(0o1777)
    shutil.copytree(lab, folder / "lab")
    subprocess.run(["chmod", "-R", "a+rX", str(folder / "lab")], check=True)
    yield folder
    for home in folder.glob("*home"):
        remove_runs(home)
    shutil.rmtree(folder, ignore_errors=True)


def as_user(python: str, shared: Path, home: Path, *args: str, timeout: float = 120) -> Result:
    proc = subprocess.run(
        [RUNUSER, "-u", USER, "--", python, "-m", "labctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=shared,
        env={
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": str(REPO),  # this checkout's code, not the copy installed in the cached venv
            "LABCTL_LAB": str(shared / "lab"),
            "LABCTL_HOME": str(home),
            "LABCTL_LOCK_FILE": str(shared / "gpus.lock"),
        },
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def as_root(shared: Path, home: Path, *args: str) -> Result:
    env = {"LABCTL_HOME": str(home), "LABCTL_LOCK_FILE": str(shared / "gpus.lock")}
    return run_labctl(*args, lab=shared / "lab", env=env)


def shared_home(shared: Path) -> Path:
    """A home the docker group shares, as an admin would make it: root:docker, setgid, group-writable."""
    home = shared / "team-home"
    home.mkdir()
    shutil.chown(home, group="docker")
    home.chmod(0o2775)
    return home


def ask(base_url: str, key: str) -> str | None:
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=10)
    reply = client.chat.completions.create(
        model="harness-test", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    return reply.choices[0].message.content


def no_world_access(home: Path) -> list[str]:
    """Files and folders under a home that any local user could write, or read when they hold keys."""
    bad = []
    for path in [home, *home.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o002 or (".state" in path.parts and mode & 0o007):
            bad.append(f"{path} {mode:o}")
    return bad


def test_a_second_user_runs_up_status_and_down(user_python: str, shared: Path) -> None:
    port = free_port()
    write_profile(shared / "lab", "u2", port)
    home = shared / "labtest2-home"  # labctl makes it, as labtest2
    up = as_user(user_python, shared, home, "up", "harness", "--profile", "u2", "--allow-unpinned", "--json")
    assert up.code == 0 and "Traceback" not in up.stderr, up.stderr
    info = json.loads(up.stdout)
    assert info["owner"] == USER and ask(info["base_url"], "none")
    status = as_user(user_python, shared, home, "status", "--json")
    if "did not answer" in status.stderr or "no answer within" in status.stderr:
        # a loaded daemon (the other tiers share it) missed status's per-host timeout: status said so; ask again
        status = as_user(user_python, shared, home, "status", "--json")
    assert status.code == 0, status.stderr
    mine = [r for r in json.loads(status.stdout) if r["run_id"] == info["run_id"]]
    assert len(mine) == 1, status.stdout + status.stderr
    mine = mine[0]
    assert (mine["owner"], mine["health"]) == (USER, "healthy")
    down = as_user(user_python, shared, home, "down", info["run_id"])
    assert down.code == 0, down.stderr
    assert not containers_of(info["run_id"])
    record = json.loads((home / "runs" / info["run_id"] / "record.json").read_text())
    assert (record["status"], record["stopped_by"], record["user"]) == ("stopped", USER, USER)
    assert (home / "runs").stat().st_uid == (home / "runs" / info["run_id"] / "record.json").stat().st_uid != 0
    assert not no_world_access(home)


def test_a_second_users_resident_deployment_keys_share_rotate_and_down(user_python: str, shared: Path) -> None:
    port = free_port()
    write_profile(shared / "lab", "res2", port)
    home = shared / "labtest2-home"
    up = as_user(user_python, shared, home, "up", "harness", "--profile", "res2", "--allow-unpinned", "--resident")
    assert up.code == 0 and "Traceback" not in up.stderr, up.stderr
    run_id = next((home / "runs").iterdir()).name
    share = as_user(user_python, shared, home, "share", run_id, "--json")
    assert share.code == 0, share.stderr
    info = json.loads(share.stdout)
    key = info["api_key"]
    with pytest.raises(openai.AuthenticationError):  # 401 without a key, through the official SDK
        ask(info["base_url"], "sk-not-the-key-0000000000")
    assert ask(info["base_url"], key)

    # The key file: readable by the engine's user through the docker group the container joins, by no one else.
    key_file = home / ".state" / "keys" / run_id / "api_key"
    assert key_file.stat().st_uid == int(subprocess.check_output(["id", "-u", USER]))
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o640 and key_file.stat().st_gid == grp.getgrnam("docker").gr_gid
    assert not no_world_access(home)

    rotated = as_user(user_python, shared, home, "rotate-key", run_id)
    assert rotated.code == 0, rotated.stderr
    new_key = json.loads(as_user(user_python, shared, home, "share", run_id, "--json").stdout)["api_key"]
    assert new_key != key
    with pytest.raises(openai.AuthenticationError):
        ask(info["base_url"], key)
    assert ask(info["base_url"], new_key)

    # The restart watcher runs as this user with the Docker socket's group, and records the rotation's restart
    # in the events file this user owns.
    [watcher] = watchers_of(run_id)
    user = subprocess.check_output(["docker", "inspect", "-f", "{{.Config.User}}", watcher], text=True).strip()
    uid = int(subprocess.check_output(["id", "-u", USER]))
    assert user == f"{uid}:{Path('/var/run/docker.sock').stat().st_gid}"
    events_file = home / "runs" / run_id / "events.jsonl"
    deadline = time.monotonic() + 15
    while '"cause": "stopped through the Docker API' not in events_file.read_text():
        assert time.monotonic() < deadline, events_file.read_text()
        time.sleep(0.2)
    assert events_file.stat().st_uid == uid

    down = as_user(user_python, shared, home, "down", run_id)
    assert down.code == 0, down.stderr
    assert not containers_of(run_id) and not key_file.parent.exists() and not watchers_of(run_id)


def test_the_engine_refuses_to_serve_when_it_cannot_read_a_second_users_key(user_python: str, shared: Path) -> None:
    port = free_port()
    write_profile(shared / "lab", "res3", port)
    home = shared / "labtest2-home"
    up = as_user(user_python, shared, home, "up", "harness", "--profile", "res3", "--allow-unpinned", "--resident")
    assert up.code == 0, up.stderr
    run_id = next((home / "runs").iterdir()).name
    key_file = home / ".state" / "keys" / run_id / "api_key"
    subprocess.run([RUNUSER, "-u", USER, "--", "chmod", "600", str(key_file)], check=True)  # the old labctl's mode
    container = containers_of(run_id)[0]
    subprocess.run(["docker", "restart", "-t", "2", container], check=True, capture_output=True)
    deadline = time.monotonic() + 20
    logs = ""
    while time.monotonic() < deadline and "refusing to serve without keys" not in logs:
        time.sleep(0.2)
        logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True).stderr
    assert "refusing to serve without keys" in logs
    with pytest.raises(openai.APIConnectionError):  # nothing answers: not "everyone", not even with a key
        ask(f"http://127.0.0.1:{port}/v1", "sk-not-the-key-0000000000")


def test_the_owner_rule_holds_between_root_and_a_second_user(user_python: str, shared: Path) -> None:
    port = free_port()
    write_profile(shared / "lab", "rootres", port)
    home = shared_home(shared)
    up = as_root(shared, home, "up", "harness", "--profile", "rootres", "--allow-unpinned", "--resident", "--json")
    assert up.code == 0, up.stderr
    run_id = json.loads(up.stdout)["run_id"]
    key = json.loads(as_root(shared, home, "share", run_id, "--json").stdout)["api_key"]

    for action in (("down", run_id), ("rotate-key", run_id)):
        refused = as_user(user_python, shared, home, *action)
        assert refused.code == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert f"run {run_id} is root's resident deployment" in refused.stderr and "--force --reason" in refused.stderr
    assert containers_of(run_id) and ask(json.loads(up.stdout)["base_url"], key)
    assert as_user(user_python, shared, home, "down", run_id, "--force").code == 2  # a reason too
    # root handed the key file to the image's own user (0600): labtest2 may not swap it, even with --force
    swap = as_user(user_python, shared, home, "rotate-key", run_id, "--force", "--reason", "rotate it")
    assert swap.code == 1 and swap.stderr.count("\n") == 1 and "only root can replace it" in swap.stderr, swap.stderr
    assert ask(json.loads(up.stdout)["base_url"], key)  # the engine and its key file still agree

    forced = as_user(user_python, shared, home, "down", run_id, "--force", "--reason", "GPU needed for labtest2")
    assert forced.code == 0 and "Traceback" not in forced.stderr, forced.stderr
    assert not containers_of(run_id)
    record = json.loads((home / "runs" / run_id / "record.json").read_text())
    assert (record["status"], record["stopped_by"], record["stop_forced"], record["stop_reason"]) == (
        "stopped",
        USER,
        True,
        "GPU needed for labtest2",
    )
    events = [json.loads(line) for line in (home / "runs" / run_id / "events.jsonl").read_text().splitlines()]
    assert {k: events[-1][k] for k in ("event", "by", "forced")} == {"event": "down", "by": USER, "forced": True}
    assert not (home / ".state" / "keys" / run_id).exists()  # labtest2 removed root's keys, as the group may
    assert not no_world_access(home)


def test_root_needs_force_for_a_second_users_resident_run(user_python: str, shared: Path) -> None:
    port = free_port()
    write_profile(shared / "lab", "res4", port)
    home = shared_home(shared)
    up = as_user(user_python, shared, home, "up", "harness", "--profile", "res4", "--allow-unpinned", "--resident")
    assert up.code == 0, up.stderr
    run_id = next((home / "runs").iterdir()).name
    refused = as_root(shared, home, "down", run_id)
    assert refused.code == 2 and f"run {run_id} is {USER}'s resident deployment" in refused.stderr
    rotated = as_root(shared, home, "rotate-key", run_id, "--force", "--reason", "key leaked in a chat")
    assert rotated.code == 0, rotated.stderr
    key = json.loads(as_user(user_python, shared, home, "share", run_id, "--json").stdout)["api_key"]
    assert ask(f"http://127.0.0.1:{port}/v1", key)  # root's rotation kept the key readable by its owner
    assert as_root(shared, home, "down", run_id, "--force", "--reason", "maintenance").code == 0
    assert not containers_of(run_id)
    if os.path.exists(home / ".state" / "keys" / run_id):
        pytest.fail("root's down left labtest2's keys behind")


def test_a_home_the_second_user_cannot_write_is_one_clear_line(user_python: str, shared: Path) -> None:
    port = free_port()
    write_profile(shared / "lab", "u5", port)
    home = shared / "roots-home"
    home.mkdir(mode=0o755)  # root's, like a lab folder in root's checkout
    result = as_user(user_python, shared, home, "up", "harness", "--profile", "u5", "--allow-unpinned")
    assert result.code == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "permission denied" in result.stderr and "--home" in result.stderr
    assert not list(home.iterdir())  # nothing written
    started = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=labctl.home={home}"], capture_output=True, text=True
    ).stdout.split()
    assert not started  # nothing started


def test_a_second_user_benchmarks_roots_run_in_a_shared_home(user_python: str, shared: Path) -> None:
    port = free_port()
    write_profile(shared / "lab", "plain", port)
    home = shared_home(shared)
    up = as_root(shared, home, "up", "harness", "--profile", "plain", "--allow-unpinned", "--json")
    assert up.code == 0, up.stderr
    run_id = json.loads(up.stdout)["run_id"]
    bench = as_user(
        user_python,
        shared,
        home,
        "bench",
        "run",
        run_id,
        "--workload",
        "latency-probe",
        "--requests",
        "3",
        "--output-len",
        "4",
        "--json",
    )
    assert bench.code == 0 and "Traceback" not in bench.stderr, bench.stderr
    bench_id = json.loads(bench.stdout)["bench_id"]
    listed = as_root(shared, home, "bench", "list", run_id, "--json")
    assert [r["bench_id"] for r in json.loads(listed.stdout)] == [bench_id]
    result = home / "runs" / run_id / "bench" / f"{bench_id}.json"
    assert result.stat().st_uid != 0 and result.stat().st_gid == grp.getgrnam("docker").gr_gid
    assert stat.S_IMODE(result.parent.stat().st_mode) == 0o2775  # root's next bench, or a third user's, fits too
    assert not no_world_access(home)
    assert as_user(user_python, shared, home, "down", run_id).code == 0  # not resident: anyone may stop it


@contextmanager
def roots_private_run() -> Iterator[tuple[Path, str]]:
    """A run in root's private home (0700: labtest2 cannot enter it) whose container is on the shared daemon."""
    private = Path(tempfile.mkdtemp(prefix="labctl-root-home-"))
    run_id = "20261205-000000-" + os.urandom(3).hex()
    (private / "runs" / run_id).mkdir(parents=True)
    (private / "runs" / run_id / "record.json").write_text("{}")
    labels = {"labctl.run_id": run_id, "labctl.home": str(private), "labctl.engine": "harness", "labctl.owner": "root"}
    flags = [x for k, v in labels.items() for x in ("--label", f"{k}={v}")]
    made = subprocess.run(["docker", "create", *flags, IMAGE, "true"], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    try:
        yield private, run_id
    finally:
        subprocess.run(["docker", "rm", "-f", made.stdout.strip()], capture_output=True, timeout=60)
        shutil.rmtree(private)


def test_a_run_of_a_home_this_user_cannot_read_is_listed_from_its_labels(user_python: str, shared: Path) -> None:
    """root's private home holds a run whose container is on the shared daemon: labtest2's status lists it from
    its labels (whose it is, which engine) instead of losing the whole host to a PermissionError."""
    with roots_private_run() as (_private, run_id):
        status = as_user(user_python, shared, shared / "labtest2-home", "status", "--json")
        assert status.code == 0 and "PermissionError" not in status.stderr, status.stderr
        theirs = [r for r in json.loads(status.stdout) if r["run_id"] == run_id]
        assert len(theirs) == 1 and theirs[0]["owner"] == "root" and theirs[0]["record"] == "", status.stdout


def test_gc_by_a_second_user_skips_a_home_it_cannot_read_and_says_so(user_python: str, shared: Path) -> None:
    """root's private home is named by a container's labels: labtest2's gc passes over it with one line naming
    it, instead of failing on a PermissionError and blaming --home."""
    with roots_private_run() as (private, _run_id):
        collected = as_user(user_python, shared, shared / "labtest2-home", "gc")
        assert collected.code == 1 and "Traceback" not in collected.stderr, collected.stderr  # 1: a skipped entry
        assert "PermissionError" not in collected.stderr and "--home" not in collected.stderr, collected.stderr
        assert "home(s) this user may not read (another user's private homes)" in collected.stderr, collected.stderr
        assert str(private) in collected.stderr or "more;" in collected.stderr, collected.stderr
        assert len(collected.stderr.strip().splitlines()) == 1, collected.stderr
        assert "nothing to collect" in collected.stdout, collected.stdout
