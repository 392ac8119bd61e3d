"""Helpers shared by the tests (imported as `support`, never from conftest): the real CLI as a subprocess,
and the rule for tests that need Docker: skip loudly locally, fail under CI=true."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LABCTL = [sys.executable, "-m", "labctl"]
IN_CI = os.environ.get("CI") == "true"


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def run_labctl(*args: str, lab: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120) -> Result:
    full_env = {**os.environ, **(env or {})}
    if lab is not None:
        full_env["LABCTL_LAB"] = str(lab)
    proc = subprocess.run(
        [*LABCTL, *args], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=lab or REPO
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true and {reason}: CI must provision it (make docker-lab)", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}; run `make docker-lab` to test against a real Docker Engine")


def compose_available() -> bool:
    return (
        shutil.which("docker") is not None
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    )


def docker_available() -> bool:
    return (
        shutil.which("docker") is not None and subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    )


def ensure_second_user(user: str) -> None:
    """A real second Unix user in the docker group (made once; root only), for the several-users tests."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        _missing("a second Unix user needs root with useradd and runuser")
    if not os.access("/usr/bin/python3", os.X_OK):
        _missing("/usr/bin/python3 (a Python every user can run) is not installed")
    if subprocess.run(["id", user], capture_output=True).returncode != 0:
        subprocess.run(["groupadd", "-f", "docker"], check=True)
        subprocess.run(["useradd", "-m", "-G", "docker", user], check=True, capture_output=True)


def tiny_tokenizer_cache(root: Path, repo: str = "acme/tiny") -> Path:
    """A Hugging Face cache holding one small BPE tokenizer (trained here, no download) whose pieces are
    shorter than words, so token and word counts differ. Returns the cache folder (HF_HUB_CACHE)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from labctl.bench.prompts import WORDS

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    corpus = [" ".join(WORDS)] * 5 + ["r0x1 p0 s1t2 0123456789 abcdefghijklmnopqrstuvwxyz"]
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"]))
    revision = "0123456789abcdef0123456789abcdef01234567"
    folder = root / ("models--" + repo.replace("/", "--"))
    (folder / "snapshots" / revision).mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(revision)
    tokenizer.save(str(folder / "snapshots" / revision / "tokenizer.json"))
    return root


# The remote lab host `labb` (scripts/remote-lab.sh, `make remote-lab`): reached over ssh:// only; the one
# non-loopback address tests use is inside the network namespace that script creates.
LABB_ADDRESS = "10.201.0.2"
LABB_DOCKER = f"ssh://labctl-remote@{LABB_ADDRESS}"
LABB_SOCKET = Path("/var/run/labctl-labb/docker.sock")
LABB_REGISTERED = REPO / "build" / "remote-lab" / "hosts.yaml"


def labb_entry() -> dict[str, object]:
    """labb's host entry as `make remote-lab` registered it; skips loudly (fails under CI=true) without it."""
    import yaml

    def missing(reason: str) -> None:
        if IN_CI:
            pytest.fail(f"CI=true and {reason}: CI must provision it (make remote-lab)", pytrace=False)
        pytest.skip(f"SKIPPED LOUDLY: {reason}; run `make remote-lab` (as root) to test a host reached over SSH")

    if shutil.which("docker") is None or shutil.which("ssh") is None:
        missing("the docker CLI or the ssh client is not installed")
    if not LABB_SOCKET.is_socket() or not LABB_REGISTERED.is_file():
        missing(f"the remote lab is not up ({LABB_SOCKET} or {LABB_REGISTERED} is absent)")
    probe = subprocess.run(
        ["ssh", "-o", "BatchMode=yes", f"labctl-remote@{LABB_ADDRESS}", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        missing(f"`ssh labctl-remote@{LABB_ADDRESS} true` fails ({probe.stderr.strip()[-200:]})")
    entry: dict[str, object] = yaml.safe_load(LABB_REGISTERED.read_text())["hosts"]["labb"]
    remove_orphans_on_labb()
    return entry


_SESSION_STARTED = time.time()
_orphans_checked = False


def remove_orphans_on_labb() -> None:
    """labctl containers on labb made before this test session began: left by an earlier session that was
    killed mid-test (labb outlives it). Only the labb tier uses labb, one test at a time, so none is anyone's."""
    global _orphans_checked
    if _orphans_checked:
        return
    _orphans_checked = True
    listed = remote_docker("ps", "-a", "--filter", "label=labctl.home", "--format", "{{.ID}} {{.CreatedAt}}")
    listed_claims = remote_docker(
        "ps", "-a", "--filter", "label=labctl.claim.home", "--format", "{{.ID}} {{.CreatedAt}}"
    )
    old = []
    for line in (listed.stdout + listed_claims.stdout).splitlines():
        container, _, created = line.partition(" ")
        when = created.rsplit(" ", 1)[0]  # "2026-12-07 03:05:35 +0000 UTC" -> drop the zone name
        stamp = datetime.datetime.strptime(when, "%Y-%m-%d %H:%M:%S %z").timestamp()
        if stamp < _SESSION_STARTED - 5:
            old.append(container)
    if old:
        remote_docker("rm", "-f", *old)


def remote_docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "-H", LABB_DOCKER, *args], capture_output=True, text=True, timeout=timeout)


def remote_names(label: str) -> list[str]:
    """Containers on labb (any state) carrying `label` (key=value)."""
    return remote_docker("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}").stdout.split()


def free_labb_port() -> int:
    """A port in 18700-18799 that no labctl run or claim on labb uses now (the claim decides races)."""
    import random

    taken = set(remote_docker("ps", "-a", "--format", "{{.Names}}").stdout.split())
    for port in random.sample(range(18700, 18800), 100):
        if f"labctl-port-{port}" not in taken:
            return port
    raise AssertionError("no free port in 18700-18799 on labb")


def remove_labb_runs(home: Path) -> None:
    """Whatever a home's runs left on labb: containers, claims, key volumes, and their SSH forwards here."""
    import json
    import signal

    for run_dir in (home / "runs").iterdir() if (home / "runs").is_dir() else []:
        for label in (f"labctl.run_id={run_dir.name}", f"labctl.claim.run_id={run_dir.name}"):
            names = remote_names(label)
            if names:
                remote_docker("rm", "-f", *names)
        remote_docker("volume", "rm", "-f", f"labctl-keys-{run_dir.name}")
        record = run_dir / "record.json"
        forward = json.loads(record.read_text()).get("forward") if record.is_file() else None
        if forward and forward.get("process"):
            pid = int(forward["process"].split(":")[0])
            cmdline = Path(f"/proc/{pid}/cmdline")
            if cmdline.exists() and b"ssh" in cmdline.read_bytes():
                os.kill(pid, signal.SIGTERM)
