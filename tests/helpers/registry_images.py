"""Images made for a test in the real registry at 127.0.0.1:5000, through the Registry HTTP API alone (no
buildx, no Docker Hub): platform images derived from the local base image (a new config per platform,
the base's layers mounted across repositories, never downloaded), and a multi-arch index over them."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx

# The lab registry (make docker-lab); LABCTL_TEST_REGISTRY names another loopback registry for a test's own images.
REGISTRY = os.environ.get("LABCTL_TEST_REGISTRY", "127.0.0.1:5000")
HARNESS_IMAGE = "127.0.0.1:5000/labctl/harness:dev"  # the local harness image (its name, whichever registry answers)
API = f"http://{REGISTRY}/v2"
BASE = "labctl/base"
BASE_TAG = "bookworm"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
ACCEPT = f"{DOCKER_MANIFEST}, application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class Pushed:
    repository: str  # 127.0.0.1:5000/hc/...
    tag: str
    index_digest: str | None
    digests: dict[str, str]  # architecture -> manifest digest
    image_ids: dict[str, str]  # architecture -> config digest (Docker's image id once pulled)
    compressed: dict[str, int]  # architecture -> config + layer bytes


def _digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _upload(client: httpx.Client, repo: str, body: bytes) -> str:
    digest = _digest(body)
    start = client.post(f"{API}/{repo}/blobs/uploads/")
    assert start.status_code == 202, start.text
    location = httpx.URL(start.headers["location"])
    done = client.put(
        location.copy_merge_params({"digest": digest}),
        content=body,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert done.status_code == 201, done.text
    return digest


def _put_manifest(client: httpx.Client, repo: str, reference: str, body: bytes, media_type: str) -> str:
    answer = client.put(f"{API}/{repo}/manifests/{reference}", content=body, headers={"Content-Type": media_type})
    assert answer.status_code == 201, answer.text
    return _digest(body)


def push_platform_images(architectures: list[str], index: bool = True, name: str = "") -> Pushed:
    """Push one image per architecture (the base image's layers under a config naming that architecture and a
    label unique to this call) and, with `index`, a manifest list over them tagged `multi`."""
    repo = f"hc/{name or 'multiarch'}-{secrets.token_hex(4)}"
    token = secrets.token_hex(8)
    with httpx.Client(timeout=30, trust_env=False) as client:
        base = client.get(f"{API}/{BASE}/manifests/{BASE_TAG}", headers={"Accept": ACCEPT})
        assert base.status_code == 200, f"the base image is not in the registry: {base.text}"
        manifest = base.json()
        config = json.loads(client.get(f"{API}/{BASE}/blobs/{manifest['config']['digest']}").content)
        for layer in manifest["layers"]:
            mounted = client.post(f"{API}/{repo}/blobs/uploads/", params={"mount": layer["digest"], "from": BASE})
            assert mounted.status_code == 201, mounted.text
        digests, ids, sizes, entries = {}, {}, {}, []
        for arch in architectures:
            config_body = json.dumps(
                {**config, "architecture": arch, "config": {**config.get("config", {}), "Labels": {"hc.test": token}}}
            ).encode()
            config_digest = _upload(client, repo, config_body)
            body = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": DOCKER_MANIFEST,
                    "config": {
                        "mediaType": manifest["config"]["mediaType"],
                        "size": len(config_body),
                        "digest": config_digest,
                    },
                    "layers": manifest["layers"],
                }
            ).encode()
            digest = _put_manifest(client, repo, _digest(body), body, DOCKER_MANIFEST)
            tag = "multi" if not index else f"only-{arch}"
            _put_manifest(client, repo, tag, body, DOCKER_MANIFEST)
            digests[arch], ids[arch] = digest, config_digest
            sizes[arch] = len(config_body) + sum(layer["size"] for layer in manifest["layers"])
            entries.append(
                {
                    "mediaType": DOCKER_MANIFEST,
                    "size": len(body),
                    "digest": digest,
                    "platform": {"architecture": arch, "os": "linux"},
                }
            )
        index_digest = None
        if index:
            body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_LIST, "manifests": entries}).encode()
            index_digest = _put_manifest(client, repo, "multi", body, DOCKER_LIST)
    return Pushed(f"{REGISTRY}/{repo}", "multi", index_digest, digests, ids, sizes)


def delete_pushed(pushed: Pushed) -> None:
    """Remove what a test pushed (the registry runs with deletes enabled); blobs stay until its own gc."""
    repo = pushed.repository.removeprefix(f"{REGISTRY}/")
    with httpx.Client(timeout=30, trust_env=False) as client:
        for digest in [pushed.index_digest, *pushed.digests.values()]:
            if digest:
                client.delete(f"{API}/{repo}/manifests/{digest}")


def build_own_image(folder: Path, payload_bytes: int, name: str = "pull") -> tuple[str, str]:
    """(reference, image id) of a new image: the harness image plus a layer of random bytes, pushed as
    REGISTRY/hc/<name>-<random>:v1, so that a test can pull and remove it without touching anyone's."""
    reference = f"{REGISTRY}/hc/{name}-{secrets.token_hex(4)}:v1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "payload.bin").write_bytes(os.urandom(payload_bytes))
    (folder / "Dockerfile").write_text(f"FROM {HARNESS_IMAGE}\nCOPY payload.bin /opt/hc-payload.bin\n")
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    subprocess.run(["docker", "build", "-q", "-t", reference, str(folder)], check=True, capture_output=True, env=env)
    subprocess.run(["docker", "push", reference], check=True, capture_output=True)
    image_id = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", reference], check=True, capture_output=True, text=True
    ).stdout.strip()
    return reference, image_id


def delete_reference(reference: str) -> None:
    """Remove a repo:tag a test pushed from the registry (by its manifest digest; deletes are enabled)."""
    name, tag = reference.removeprefix(f"{REGISTRY}/").rsplit(":", 1)
    with httpx.Client(timeout=30, trust_env=False) as client:
        head = client.head(f"{API}/{name}/manifests/{tag}", headers={"Accept": ACCEPT})
        digest = head.headers.get("docker-content-digest")
        if head.status_code == 200 and digest:
            client.delete(f"{API}/{name}/manifests/{digest}")


def remove_own_image(reference: str, image_id: str) -> None:
    """Remove a test's own image everywhere: containers a failed test left on it (only that test made any:
    the image is unique to it), the local image, and its tag in the registry."""
    ours = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"ancestor={image_id}"], capture_output=True, text=True
    ).stdout.split()
    if ours:
        subprocess.run(["docker", "rm", "-f", *ours], capture_output=True)
    for leftover in (reference, image_id):
        subprocess.run(["docker", "rmi", leftover], capture_output=True)
    delete_reference(reference)
