"""The registry edge's pure parts: where a reference's registry is, when plain http is allowed (Docker's own
rule), and which manifest of an index a platform gets."""

from __future__ import annotations

import pytest

from labctl.catalog.image import ImageRef
from labctl.errors import BadInput, LabctlError
from labctl.host.images.registry import Platform, choose, locate, plain_http_allowed
from labctl.run.records.prep import PrepPart
from labctl.run.records.record import Record

D1, D2, D3 = ("sha256:" + c * 64 for c in "123")


@pytest.mark.parametrize(
    ("image", "api", "path"),
    [
        ("vllm/vllm-openai:v0.34.0", "https://registry-1.docker.io", "vllm/vllm-openai"),
        ("ubuntu:24.04", "https://registry-1.docker.io", "library/ubuntu"),
        ("docker.io/ubuntu:24.04", "https://registry-1.docker.io", "library/ubuntu"),
        ("index.docker.io/vllm/vllm-openai:v0.34.0", "https://registry-1.docker.io", "vllm/vllm-openai"),
        ("nvcr.io/nvidia/tensorrt-llm/release:1.2.1", "https://nvcr.io", "nvidia/tensorrt-llm/release"),
        ("127.0.0.1:5000/labctl/harness:dev", "http://127.0.0.1:5000", "labctl/harness"),
        ("localhost:5000/x:1", "http://localhost:5000", "x"),
        ("10.1.2.3:5000/x:1", "https://10.1.2.3:5000", "x"),
    ],
)
def test_where_the_registry_is(image: str, api: str, path: str) -> None:
    registry = locate(ImageRef.parse(image))
    assert (registry.api, registry.path) == (api, path)


def test_plain_http_only_where_docker_allows_it() -> None:
    assert plain_http_allowed("127.0.0.5:5000", frozenset(), ())
    assert not plain_http_allowed("10.1.2.3:5000", frozenset(), ())
    assert plain_http_allowed("10.1.2.3:5000", frozenset(), ("10.0.0.0/8",))
    assert plain_http_allowed("registry.lab:5000", frozenset({"registry.lab:5000"}), ())
    assert not plain_http_allowed("registry.lab:5000", frozenset(), ("10.0.0.0/8",))  # names are not matched to CIDRs


def test_the_platform_entry_wins_wherever_it_is_listed() -> None:
    index = {
        "manifests": [
            {"digest": D1, "platform": {"os": "linux", "architecture": "amd64"}},
            {"digest": D3, "platform": {"os": "unknown", "architecture": "unknown"}},
            {"digest": D2, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
        ]
    }
    assert choose(index, Platform("linux", "arm64"), "x", "r") == (D2, Platform("linux", "arm64", "v8"))
    assert choose(index, Platform("linux", "amd64"), "x", "r")[0] == D1
    with pytest.raises(
        BadInput, match=r"no image for this host's platform linux/s390x \(the index offers: linux/amd64, "
    ):
        choose(index, Platform("linux", "s390x"), "x", "r")
    with pytest.raises(LabctlError, match="without a valid 'manifests' list"):
        choose({"manifests": "nope"}, Platform("linux", "amd64"), "x", "r")


def test_prep_parts_round_trip_and_old_records_read_without_them() -> None:
    record = Record("r1", "running", "harness", "smoke", "m", prep={"image_pull": PrepPart(1.5, 1024, False, "pulled")})
    data = record.to_json()
    assert data["prep"] == {"image_pull": {"seconds": 1.5, "bytes": 1024, "cached": False, "detail": "pulled"}}
    assert Record.from_json(data).prep == record.prep
    del data["prep"]
    assert Record.from_json(data).prep == {}
