"""Validators match the whole text: `$` also matches before a trailing newline, and `str.isdigit`
accepts digits int() cannot read. A name, id, digest or number with either slips through."""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.catalog.contracts import contract_path
from labctl.catalog.image import ImageRef
from labctl.catalog.lab import check_name
from labctl.compose.labels import GpuClaim
from labctl.errors import BadInput
from labctl.run.records.store import Runs, is_run_id
from labctl.run.resident.resident_plan import image_user_ids

RUN_ID = "20261203-015815-a1b2c3"
DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize("suffix", ["\n", "\r\n", " ", "\n\n"])
def test_run_ids_match_whole(tmp_path: Path, suffix: str) -> None:
    assert is_run_id(RUN_ID) and not is_run_id(RUN_ID + suffix)
    with pytest.raises(BadInput, match="is not a run id"):
        Runs(tmp_path).dir(RUN_ID + suffix)


def test_run_folders_with_a_newline_are_not_listed(tmp_path: Path) -> None:
    for name in (RUN_ID, RUN_ID.replace("a1b2c3", "d4e5f6") + "\n"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "record.json").write_text("{}")
    assert Runs(tmp_path).all_ids() == [RUN_ID]


@pytest.mark.parametrize("name", ["qwen3-32b\n", "vllm\n", "a\nb"])
def test_engine_profile_workload_suite_names_match_whole(name: str) -> None:
    with pytest.raises(BadInput, match="is not allowed"):
        check_name(name, "profile")


def test_contract_versions_match_whole() -> None:
    with pytest.raises(BadInput, match="not a plain version"):
        contract_path(Path("engines"), "vllm", "0.34.0\n")


def test_a_digest_given_later_is_checked_too() -> None:
    ref = ImageRef.parse("vllm/vllm-openai:v1")
    assert ref.with_digest(DIGEST).digest == DIGEST
    for bad in (DIGEST + "\n", "sha256:abc", "sha256:" + "A" * 64, DIGEST + " --privileged"):
        with pytest.raises(ValueError, match="digest"):
            ref.with_digest(bad)


@pytest.mark.parametrize("text", ["count:²", "count:٣", "count:1\n"])
def test_gpu_claim_labels_with_odd_digits(text: str) -> None:
    assert GpuClaim.parse(text).count == 0


@pytest.mark.parametrize("user", ["²", "1000:²", "٣:٣"])
def test_image_users_with_odd_digits(user: str) -> None:
    assert image_user_ids(user) is None


def _export(tmp_path: Path, digest: str, run_id: str = RUN_ID) -> Path:
    import json

    doc = {
        "labctl_export": 1,
        "content_sha256": "0" * 64,
        "setup": {
            "engine": "harness",
            "profile": "smoke",
            "resolved_profile": {},
            "image": {"reference": "x/y:1", "digest": digest, "pinned": True},
            "compose_sha256": "0" * 64,
            "environment_label": "harness-check",
        },
        "host": {"run_id": run_id, "port": 1, "bind": "127.0.0.1", "gpu_ids": [], "cache_dir": None, "run_labels": {}},
        "compose": "",
        "record": {
            "schema_version": 1,
            "run_id": RUN_ID,
            "status": "stopped",
            "engine": "harness",
            "profile": "smoke",
            "served_model_name": "m",
        },
    }
    path = tmp_path / "export.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


@pytest.mark.parametrize("digest", [DIGEST + "\n", "sha256:abc", 42])
def test_export_digests_match_whole(tmp_path: Path, digest: object) -> None:
    from labctl.run.records.export import load_export

    assert load_export(_export(tmp_path, DIGEST)).setup["image"]["digest"] == DIGEST
    with pytest.raises(BadInput, match=r"setup\.image\.digest"):
        load_export(_export(tmp_path, digest))  # type: ignore[arg-type]


@pytest.mark.parametrize("run_id", [RUN_ID + "\n", "../../etc", 7])
def test_export_run_ids_match_whole(tmp_path: Path, run_id: object) -> None:
    from labctl.run.records.export import load_export

    with pytest.raises(BadInput, match=r"host\.run_id"):
        load_export(_export(tmp_path, DIGEST, run_id))  # type: ignore[arg-type]
