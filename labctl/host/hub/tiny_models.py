"""The lab's tiny models (a dense Qwen3 and a Qwen3-MoE with random weights, made by scripts/tiny-models.sh
inside the vLLM CPU image) served as Hub repositories `labctl/NAME` on 127.0.0.1, so that a profile whose
model says `hub: loopback` is fetched at its pinned commit like any model, and nothing comes from the internet."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from labctl.errors import BadInput, LabctlError
from labctl.host.hub.loopback import HubRepo, loopback_hub, repos_in

ORG = "labctl"  # the tiny models are repositories labctl/tiny-qwen3, labctl/tiny-qwen3-moe
MAKER = Path("scripts") / "tiny-models.sh"
MAKE_TIMEOUT_S = 900.0


def models_folder(lab_root: Path) -> Path:
    """$LABCTL_TINY_MODELS, else build/tiny-models in the lab (what `make tiny-models` makes)."""
    chosen = os.environ.get("LABCTL_TINY_MODELS")
    return Path(chosen).expanduser() if chosen else lab_root / "build" / "tiny-models"


def tiny_repos(folder: Path) -> dict[str, HubRepo]:
    return repos_in(folder, org=ORG) if folder.is_dir() else {}


def ensure_models(lab_root: Path, folder: Path, say: Callable[[str], None]) -> dict[str, HubRepo]:
    """The repositories in `folder`, made first (scripts/tiny-models.sh, about a minute) when it holds none."""
    repos = tiny_repos(folder)
    if repos:
        return repos
    maker = lab_root / MAKER
    if not maker.is_file():
        raise BadInput(
            f"the tiny models are not in {folder} and this lab ({lab_root}) has no {MAKER} to make them: run "
            "`make tiny-models` in a labctl checkout and point LABCTL_TINY_MODELS at its build/tiny-models."
        )
    say(f"the tiny models are not in {folder}: making them ({MAKER}, in the vLLM CPU image, offline)")
    env = {**os.environ, "LABCTL_TINY_MODELS": str(folder)}
    try:
        done = subprocess.run(
            ["bash", str(maker)], env=env, capture_output=True, text=True, timeout=MAKE_TIMEOUT_S, cwd=lab_root
        )
    except subprocess.TimeoutExpired:
        raise LabctlError(f"{MAKER} did not finish within {MAKE_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise LabctlError(f"could not make the tiny models: {last[:500]}")
    repos = tiny_repos(folder)
    if not repos:
        raise LabctlError(f"{MAKER} ended without models in {folder}")
    return repos


@contextmanager
def serving(repos: dict[str, HubRepo], port: int = 0) -> Iterator[str]:
    """A loopback Hub for as long as the block runs; yields its endpoint (http://127.0.0.1:PORT)."""
    with loopback_hub(repos, port=port) as hub:
        yield hub.endpoint
