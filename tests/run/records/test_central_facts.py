"""The central typed facts: image references, container labels and run records, in and out."""

from __future__ import annotations

import json

import pytest

from labctl.catalog.image import ImageRef, digests_of
from labctl.compose.labels import GpuClaim, RunLabels
from labctl.host.gpus.inventory import Gpu
from labctl.run.records.record import Endpoint, GpuSet, ImageInfo, Record, ResidentInfo, Timings
from labctl.run.records.store import redact

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    "text, repository, tag, digest",
    [
        ("vllm/vllm-openai:v0.34.0", "vllm/vllm-openai", "v0.34.0", None),
        ("127.0.0.1:5000/labctl/harness:dev@" + DIGEST, "127.0.0.1:5000/labctl/harness", "dev", DIGEST),
        ("127.0.0.1:5000/labctl/harness@" + DIGEST, "127.0.0.1:5000/labctl/harness", None, DIGEST),
        ("nvcr.io/nvidia/tensorrt-llm/release:1.2.1", "nvcr.io/nvidia/tensorrt-llm/release", "1.2.1", None),
        ("busybox", "busybox", None, None),
    ],
)
def test_image_ref_parses_the_parts(text: str, repository: str, tag: str | None, digest: str | None) -> None:
    ref = ImageRef.parse(text)
    assert (ref.repository, ref.tag, ref.digest) == (repository, tag, digest)
    assert str(ref) == text and ref.pinned == (digest is not None)


@pytest.mark.parametrize(
    "text",
    [
        "vllm/vllm-openai:v1\n",
        "Vllm/x:1",
        "x:1@sha256:abc",
        "x:1@" + DIGEST + "\n",
        "x@",
        "x:t a",
        "a" * 600,
        "x:1@sha512:" + "a" * 64,
    ],
)
def test_image_ref_refuses_what_is_not_a_reference(text: str) -> None:
    with pytest.raises(ValueError):
        ImageRef.parse(text)


def test_image_ref_by_digest_and_repo_digests() -> None:
    ref = ImageRef.parse("127.0.0.1:5000/labctl/harness:dev")
    assert ref.with_digest(DIGEST).by_digest == "127.0.0.1:5000/labctl/harness@" + DIGEST
    with pytest.raises(ValueError):
        _ = ref.by_digest
    found = digests_of(["127.0.0.1:5000/labctl/harness@" + DIGEST, "other/repo@sha256:" + "b" * 64], ref.repository)
    assert found == [DIGEST]


def test_run_labels_round_trip_and_gpu_claims() -> None:
    labels = RunLabels(
        engine="sglang",
        profile="qwen3-32b",
        gpus=GpuClaim(("0", "1"), 2),
        run_id="20261203-015815-a1b2c3",
        owner="alice",
        port="30000",
        host="127.0.0.1",
        resident=True,
        build={"max_batch_size": "64"},
    )
    back = RunLabels.from_labels(labels.to_labels())
    assert back == labels
    assert back.gpus.ids == ("0", "1")
    assert RunLabels.from_labels({"labctl.gpus": "count:1"}).gpus == GpuClaim((), 1)
    assert RunLabels.from_labels({"labctl.gpus": "count:1"}).gpus.ids == ()  # never ["count:1"]
    assert RunLabels.from_labels({}).gpus == GpuClaim()
    assert set(labels.setup_labels()) | set(labels.run_labels()) == set(labels.to_labels())
    assert not set(labels.setup_labels()) & set(labels.run_labels())


def sample_record() -> Record:
    return Record(
        run_id="20261203-015815-a1b2c3",
        status="running",
        engine="harness",
        profile="smoke",
        served_model_name="harness-small",
        owner="alice",
        endpoint=Endpoint("http://127.0.0.1:18000/v1", "127.0.0.1", 18000),
        image=ImageInfo(reference="x:1", digest=DIGEST, pinned=True, repo_digests=("x@" + DIGEST,)),
        gpus=GpuSet(ids=("0",), count=1, devices=(Gpu("0", "Simulated NVIDIA H100", "GPU-1", "580", "0"),)),
        timings=Timings(image_pull_s=1.5, cold_start_s=2.0),
        run_labels=RunLabels(run_id="20261203-015815-a1b2c3", owner="alice", resident=True),
        resident=ResidentInfo(keys=1, key_fingerprints=("sha256:abcd",)),
        resolved_profile={"model": {"id": "m", "revision": "main"}},
    )


def test_record_round_trips_through_json() -> None:
    record = sample_record()
    text = json.dumps(record.to_json())
    assert Record.from_json(json.loads(text)) == record


def test_record_keeps_unknown_keys_and_refuses_a_newer_schema() -> None:
    data = sample_record().to_json() | {"added_by_a_newer_labctl": {"x": 1}}
    back = Record.from_json(data)
    assert back.extra == {"added_by_a_newer_labctl": {"x": 1}}
    assert back.to_json()["added_by_a_newer_labctl"] == {"x": 1}
    with pytest.raises(ValueError, match="newer"):
        Record.from_json(data | {"schema_version": 99})
    with pytest.raises(ValueError):
        Record.from_json(data | {"gpus": {"ids": "0"}})


def test_a_record_written_before_the_structure_step_reads() -> None:
    old = {  # the shape labctl wrote before records were typed (schema 1)
        "schema_version": 1,
        "run_id": "20261203-015815-a1b2c3",
        "status": "stopped",
        "reason": None,
        "user": "root",
        "owner": "root",
        "host": "lab1",
        "created_at": "2026-12-03T01:58:15.000Z",
        "labctl_version": "0.1.0",
        "environment_label": "harness-check",
        "engine": "harness",
        "profile": "smoke",
        "profile_sha256": "ab",
        "resolved_profile": {"port": 18000, "host": "127.0.0.1"},
        "allow_unsupported": False,
        "support_problem": None,
        "served_model_name": "harness-small",
        "probe": "/health",
        "metrics_path": "/metrics",
        "image": {
            "reference": "x:1",
            "pinned": False,
            "digest": None,
            "repo_digests": [],
            "image_id": "sha256:1",
            "user": "",
            "pulled": False,
        },
        "compose": {
            "file": "compose.yaml",
            "project": "labctl-x",
            "command": ["docker", "compose"],
            "render_options": {"cache_dir": "/c", "engine_store": None},
        },
        "env_names": [],
        "gpus": {"ids": [], "count": 0, "devices": [], "note": "no GPU"},
        "endpoint": {"host": "127.0.0.1", "port": 18000, "base_url": "http://127.0.0.1:18000/v1"},
        "timings": {
            "image_pull_s": None,
            "engine_build_s": None,
            "compose_up_s": 0.4,
            "port_open_s": 1.0,
            "ready_s": 1.1,
            "first_completion_s": 1.2,
            "cold_start_s": 1.2,
            "total_s": 2.0,
        },
        "replaced": [],
        "reproduced_from": None,
        "record_path": "/r/record.json",
        "run_labels": {"labctl.run_id": "20261203-015815-a1b2c3", "labctl.owner": "root", "labctl.resident": "false"},
        "resident": None,
        "setup": {"compose_sha256": "cd"},
        "stopped_at": "2026-12-03T02:00:00.000Z",
        "stopped_by": "root",
        "observed": {"restarts": 1, "health": "healthy", "at": "t", "at_monotonic": 5},
    }
    record = Record.from_json(old)
    assert record.timings.cold_start_s == 1.2 and record.run_labels is not None
    assert record.run_labels.owner == "root" and record.observed is not None and record.observed.restarts == 1
    assert record.summary()["gpus"] == []


def test_redaction_hides_values_under_secret_names_but_keeps_names() -> None:
    data = {
        "env": {"HF_TOKEN": "hf_secret", "MODEL": "m"},
        "env_names": ["HF_TOKEN"],
        "api_key": "sk-123",
        "nested": [{"password": "p"}],
        "key_fingerprints": ["sha256:ab"],
        "auth_kind": "env",
    }
    out = redact(data)
    assert out["env"]["HF_TOKEN"] == "<redacted>" and out["env"]["MODEL"] == "m"
    assert out["api_key"] == "<redacted>" and out["nested"][0]["password"] == "<redacted>"
    assert out["env_names"] == ["HF_TOKEN"] and out["key_fingerprints"] == ["sha256:ab"] and out["auth_kind"] == "env"
    assert "hf_secret" not in json.dumps(out) and "sk-123" not in json.dumps(out)
