"""Helpers shared by the tests (imported as `support`, never from conftest): the real CLI as a subprocess,
and the rule for tests that need Docker: skip loudly locally, fail under CI=true."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
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
