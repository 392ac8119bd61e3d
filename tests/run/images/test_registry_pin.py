"""labctl pin asks the real registry at 127.0.0.1:5000 for a digest without pulling anything: a multi-arch
index pushed through the registry API resolves to this host's platform image, and no layer reaches the
daemon. A missing tag, a registry that is down and a hostile registry each give one clear line and leave
the profile as it was."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import labctl
from helpers.registry_images import Pushed, delete_pushed, push_platform_images

pytestmark = pytest.mark.docker

GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def host_arch() -> str:
    arch = subprocess.run(["docker", "info", "-f", "{{.Architecture}}"], capture_output=True, text=True, check=True)
    return GO_ARCH.get(arch.stdout.strip(), arch.stdout.strip())


def profile_path(lab: Path) -> Path:
    return lab / "engines" / "harness" / "profiles" / "smoke.yaml"


def point_at(lab: Path, image: str) -> None:
    path = profile_path(lab)
    data = yaml.safe_load(path.read_text())
    path.write_text(path.read_text().replace(f"image: {data['image']}", f"image: {image}"))


def daemon_knows(reference: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", reference], capture_output=True).returncode == 0


@pytest.fixture
def multiarch(docker_engine: None) -> Iterator[Pushed]:
    arch = host_arch()
    other = "arm64" if arch != "arm64" else "amd64"
    pushed = push_platform_images([other, arch])  # the host's platform second: the first entry must not win
    yield pushed
    delete_pushed(pushed)


def test_pin_resolves_the_platform_image_of_an_index_without_pulling(lab: Path, home: Path, multiarch: Pushed) -> None:
    arch = host_arch()
    point_at(lab, f"{multiarch.repository}:multi")
    result = labctl(lab, home, "pin", "harness", "--profile", "smoke", "--json")
    assert result.code == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["digest"] == multiarch.digests[arch]
    assert answer["index_digest"] == multiarch.index_digest
    assert answer["platform"] == f"linux/{arch}" and answer["compressed_bytes"] == multiarch.compressed[arch]
    text = profile_path(lab).read_text()
    assert f"image: {multiarch.repository}:multi@{multiarch.digests[arch]}  # linux/{arch} image of index " in text
    assert multiarch.index_digest and multiarch.index_digest in text and "unpinned" not in text
    assert labctl(lab, home, "validate", "harness", "--profile", "smoke").code == 0
    # nothing was pulled: the daemon knows neither the reference nor the image (its config digest)
    assert not daemon_knows(f"{multiarch.repository}@{multiarch.digests[arch]}")
    assert not daemon_knows(multiarch.image_ids[arch])
    again = labctl(lab, home, "pin", "harness", "--profile", "smoke")  # re-pinning replaces the note, never stacks it
    assert again.code == 0, again.stderr
    assert profile_path(lab).read_text().count("image of index") == 1


def test_an_index_without_this_platform_is_refused(lab: Path, home: Path, docker_engine: None) -> None:
    pushed = push_platform_images(["s390x"], name="foreign")
    try:
        point_at(lab, f"{pushed.repository}:multi")
        before = profile_path(lab).read_text()
        result = labctl(lab, home, "pin", "harness", "--profile", "smoke")
        assert result.code == 2
        assert result.stderr.startswith(
            f"Error: {pushed.repository}:multi has no image for this host's platform linux/"
        )
        assert "the index offers: linux/s390x" in result.stderr and len(result.stderr.splitlines()) == 1
        assert profile_path(lab).read_text() == before
    finally:
        delete_pushed(pushed)


def test_a_missing_tag_is_bad_input(lab: Path, home: Path) -> None:
    point_at(lab, "127.0.0.1:5000/labctl/harness:no-such-tag")
    before = profile_path(lab).read_text()
    result = labctl(lab, home, "pin", "harness", "--profile", "smoke")
    assert result.code == 2
    assert result.stderr == (
        "Error: 127.0.0.1:5000/labctl/harness:no-such-tag: the registry 127.0.0.1:5000 has no such image (HTTP 404 "
        "for labctl/harness:no-such-tag). Check the image's name and tag in the profile, or push it first.\n"
    )
    assert profile_path(lab).read_text() == before


def test_a_registry_that_is_down(lab: Path, home: Path) -> None:
    port = free_port()  # nothing listens there
    point_at(lab, f"127.0.0.1:{port}/labctl/harness:dev")
    before = profile_path(lab).read_text()
    result = labctl(lab, home, "pin", "harness", "--profile", "smoke")
    assert result.code == 1
    assert result.stderr.startswith(
        f"Error: 127.0.0.1:{port}/labctl/harness:dev: the registry 127.0.0.1:{port} does not answer at "
        f"http://127.0.0.1:{port} (ConnectError"
    )
    assert len(result.stderr.splitlines()) == 1 and profile_path(lab).read_text() == before


MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": 2,
            "digest": "sha256:" + "a" * 64,
        },
        "layers": [],
    }
).encode()


@contextmanager
def hostile_registry(mode: str) -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if mode == "oversize":  # a "manifest" of 64 MiB, streamed without a length
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
                self.end_headers()
                try:
                    for _ in range(64):
                        self.wfile.write(b" " * (1024 * 1024))
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
            self.send_header("Content-Length", str(len(MANIFEST)))
            self.send_header("Docker-Content-Digest", "sha256:" + "0" * 64)  # not what the body hashes to
            self.end_headers()
            self.wfile.write(MANIFEST)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("oversize", "sent a manifest larger than 4096 KiB; refusing it."),
        ("bad-digest", "said the manifest is 'sha256:0000"),
    ],
)
def test_a_hostile_registry_answer_is_refused(lab: Path, home: Path, mode: str, says: str) -> None:
    with hostile_registry(mode) as port:
        point_at(lab, f"127.0.0.1:{port}/evil/image:v1")
        before = profile_path(lab).read_text()
        result = labctl(lab, home, "pin", "harness", "--profile", "smoke")
    assert result.code == 1
    assert result.stderr.startswith(f"Error: 127.0.0.1:{port}/evil/image:v1: the registry 127.0.0.1:{port} ")
    assert says in result.stderr and len(result.stderr.splitlines()) == 1
    assert profile_path(lab).read_text() == before


@contextmanager
def token_registry() -> Iterator[tuple[int, list[str]]]:
    """A loopback registry that, like Docker Hub, answers 401 with a Bearer challenge and serves the manifest
    only with the token its realm hands out. (A stand-in written for this test: the packaged registry's token
    auth needs a signing PKI and a token service of its own.) Yields its port and the token requests seen."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for key, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            port = self.server.server_address[1]
            if self.path.startswith("/token?"):
                asked.append(self.path)
                if self.headers.get("Authorization"):  # the login Docker has, shown to the token service
                    asked.append(self.headers["Authorization"])
                self._send(200, json.dumps({"token": "hc-anonymous-pull"}).encode(), {})
            elif self.headers.get("Authorization") != "Bearer hc-anonymous-pull":
                challenge = f'Bearer realm="http://127.0.0.1:{port}/token",service="hc-registry"'
                self._send(401, b"{}", {"WWW-Authenticate": challenge})
            else:
                self._send(200, MANIFEST, {"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_registry_that_demands_a_token(lab: Path, home: Path) -> None:
    import hashlib

    with token_registry() as (port, asked):
        point_at(lab, f"127.0.0.1:{port}/team/engine:v1")
        result = labctl(lab, home, "pin", "harness", "--profile", "smoke", "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["digest"] == "sha256:" + hashlib.sha256(MANIFEST).hexdigest()
    assert asked == ["/token?scope=repository%3Ateam%2Fengine%3Apull&service=hc-registry"]


def test_a_token_service_is_shown_the_login_docker_has(lab: Path, home: Path, tmp_path: Path) -> None:
    """As NGC and Docker Hub want it for private images: the realm gets Basic with Docker's login, over loopback."""
    import base64

    from helpers.support import run_labctl

    with token_registry() as (port, asked):
        point_at(lab, f"127.0.0.1:{port}/team/engine:v1")
        auth = base64.b64encode(b"$oauthtoken:nvapi-test-key").decode()
        (tmp_path / "docker").mkdir()
        (tmp_path / "docker" / "config.json").write_text(json.dumps({"auths": {f"127.0.0.1:{port}": {"auth": auth}}}))
        env = {"LABCTL_HOME": str(home), "DOCKER_CONFIG": str(tmp_path / "docker")}
        result = run_labctl("pin", "harness", "--profile", "smoke", lab=lab, env=env)
    assert result.code == 0, result.stderr
    assert asked[1:] == [f"Basic {auth}"] and "nvapi-test-key" not in result.stdout + result.stderr
