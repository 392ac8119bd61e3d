"""The design card's command as typed, on the simulated H100 host, from a fresh `labctl init`: the shipped
sglang/qwen3-32b profile names an image tag and `revision: main`. On a terminal (a real pty) `up` shows what
pinning resolves (tag -> digest from the loopback registry, and the commit main names now on the loopback Hub),
asks once, pins the profile and goes on to a healthy engine; answered "no", it writes nothing. Off a terminal it exits 2
with one line naming the one command that pins it.

The profile's image is the sglang persona by tag (unpinned, as shipped): Docker Hub is out of reach here."""

from __future__ import annotations

import json
import os
import pty
import select
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers.harness_proc import free_port
from helpers.sim_lab import REGISTRY, SimUser, sim_user, simulate
from helpers.support import LABCTL

pytestmark = [pytest.mark.docker, pytest.mark.lab]

QUESTION = b"Pin it and go on? [y/N]: "


@pytest.fixture
def user(tmp_path: Path) -> Iterator[SimUser]:
    with sim_user(tmp_path) as made:
        made_lab = made.labctl("init", "lab")
        assert made_lab.code == 0, made_lab
        simulate(made.lab, "sglang", "qwen3-32b")
        yield made


def on_a_pty(user: SimUser, args: list[str], answer: bytes, timeout: float = 300) -> tuple[int, str]:
    """Run labctl with a pty as its stdin, stdout and stderr; answer the question once; (exit code, all output)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: labctl on the terminal
        os.chdir(user.root)
        os.execvpe(LABCTL[0], [*LABCTL, *args], user.env)
    seen = b""
    answered = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
        if not answered and seen.rstrip().endswith(QUESTION.rstrip()):
            os.write(fd, answer + b"\n")
            answered = True
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace").replace("\r\n", "\n")


def test_on_a_terminal_up_shows_what_pinning_resolves_asks_once_pins_and_goes_on(user: SimUser) -> None:
    profile = user.profile("sglang", "qwen3-32b")
    commit = user.hub.repos["Qwen/Qwen3-32B"].commit
    persona = f"{REGISTRY}/labctl/persona-sglang:0.5.23"
    code, shown = on_a_pty(user, ["up", "sglang", "--profile", "qwen3-32b", "--port", str(free_port())], b"y")
    assert code == 0, shown
    assert shown.count("Pin it and go on? [y/N]") == 1
    assert "profile sglang/qwen3-32b is not pinned. Pinning it for host sim-h100 resolves:" in shown
    assert f"  image  {persona} -> {persona}@sha256:" in shown
    assert f"  model  Qwen/Qwen3-32B@main -> commit {commit} now (the profile keeps main; each run" in shown
    assert f"Pinning writes {profile} (what `labctl pin sglang --profile qwen3-32b` does)." in shown
    written = yaml.safe_load(profile.read_text())
    assert written["image"].startswith(f"{persona}@sha256:") and "unpinned" not in written
    assert written["model"]["revision"] == "main"  # the series a study fixes; the run records the commit
    assert user.labctl("validate", "sglang", "--profile", "qwen3-32b").code == 0
    runs = list((user.lab / "runs").glob("*/record.json"))
    assert len(runs) == 1, shown
    record = json.loads(runs[0].read_text())
    assert record["image"]["digest"] == written["image"].split("@")[1]
    assert record["engine_setup"]["model_commit"] == commit and record["host_entry"] == "sim-h100"
    assert f"ready: sglang/qwen3-32b run {record['run_id']}" in shown
    again = user.labctl("up", "sglang", "--profile", "qwen3-32b", "--port", str(free_port()), "--replace", "--json")
    assert again.code == 0 and "Pin it" not in again.stderr, again.stderr  # pinned now: no question, off a terminal
    run_id = json.loads(again.stdout.strip().splitlines()[-1])["run_id"]
    assert user.labctl("down", run_id).code == 0


def test_answered_no_it_writes_nothing_and_names_the_command(user: SimUser) -> None:
    profile = user.profile("sglang", "qwen3-32b")
    before = profile.read_text()
    code, shown = on_a_pty(user, ["up", "sglang", "--profile", "qwen3-32b", "--port", str(free_port())], b"n")
    assert code == 2, shown
    assert "pin it with `labctl pin sglang --profile qwen3-32b`" in shown and "Traceback" not in shown
    assert profile.read_text() == before and not (user.lab / "runs").exists()


def test_off_a_terminal_up_exits_2_with_the_one_command(user: SimUser) -> None:
    profile = user.profile("sglang", "qwen3-32b")
    before = profile.read_text()
    result = user.labctl("up", "sglang", "--profile", "qwen3-32b")
    assert result.code == 2 and result.stdout == ""
    assert result.stderr == (
        f"Error: profile sglang/qwen3-32b uses '{REGISTRY}/labctl/persona-sglang:0.5.23', which is not pinned by "
        "digest (a tag can point at another image tomorrow): pin it with `labctl pin sglang --profile qwen3-32b` "
        "(on a terminal, `labctl up` offers to), or pass --allow-unpinned (the digest actually run is recorded "
        "either way).\n"
    )
    assert profile.read_text() == before and not (user.lab / "runs").exists()
    pinned = user.labctl("pin", "sglang", "--profile", "qwen3-32b", "--json")  # the command it names does it
    assert pinned.code == 0, pinned.stderr
    assert json.loads(pinned.stdout)["commit"] == user.hub.repos["Qwen/Qwen3-32B"].commit
