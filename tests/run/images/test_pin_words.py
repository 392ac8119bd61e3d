"""What `up` shows before it pins and the one command it names, from values alone (no registry, no Hub)."""

from __future__ import annotations

from pathlib import Path

from labctl.catalog.lab import Lab
from labctl.run.images.pin import Pinned, PinPlan, pin_command, pin_lines

DIGEST = "sha256:" + "a" * 64
COMMIT = "5c87bc0b0324bc286285c5b5b551e75fb1776b9a"


def plan(commit: str | None, note: str = "") -> PinPlan:
    pinned = Pinned(
        old="lmsysorg/sglang:v0.5.23",
        new=f"lmsysorg/sglang:v0.5.23@{DIGEST}",
        digest=DIGEST,
        index_digest=None,
        platform="linux/amd64",
        compressed_bytes=3 * 1024**3,
        model="Qwen/Qwen3-32B",
        revision="main",
        commit=commit,
        revision_note=note,
    )
    return PinPlan("sglang", "qwen3-32b", pinned)


def test_the_lines_say_tag_to_digest_and_the_commit_main_names_now() -> None:
    assert pin_lines(plan(COMMIT)) == [
        f"  image  lmsysorg/sglang:v0.5.23 -> lmsysorg/sglang:v0.5.23@{DIGEST}",
        "         linux/amd64 image, 3.00 GiB compressed (not pulled)",
        f"  model  Qwen/Qwen3-32B@main -> commit {COMMIT} now (the profile keeps main; each run records the "
        "commit it fetched)",
    ]
    why = "atlas cannot pin a model revision: it serves the Hub's main"
    assert pin_lines(plan(None, why))[-1] == f"  model  Qwen/Qwen3-32B@main ({why})"


def test_the_one_command_makes_a_lab_first_only_for_the_shipped_lab(tmp_path: Path) -> None:
    assert pin_command(Lab(tmp_path), "sglang", "qwen3-32b", "~/lab") == "labctl pin sglang --profile qwen3-32b"
    shipped = Lab(tmp_path, packaged=True)
    assert pin_command(shipped, "sglang", "qwen3-32b", "~/lab") == (
        "labctl init ~/lab && labctl pin sglang --profile qwen3-32b"
    )
