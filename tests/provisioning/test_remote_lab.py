"""The remote lab host `labb` (scripts/remote-lab.sh, `make remote-lab`): a second Docker daemon in
a network namespace, reached only the way labctl reaches remote hosts — over SSH.

Every container and compose project here is named `remotetest-…` and removed afterwards. The only
addresses used are loopback and 10.201.0.2, inside the namespace the project's own script creates.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.lab, pytest.mark.labb]  # labb's own tier: one test at a time

ADDRESS = "10.201.0.2"
SSH_TARGET = f"labctl-remote@{ADDRESS}"
DOCKER_URL = f"ssh://{SSH_TARGET}"
LABB_SOCKET = Path("/var/run/labctl-labb/docker.sock")
NVIDIA_SMI = ["/var/lib/labctl-labb/bin/nvidia-smi", "--sim-config", "/var/lib/labctl-labb/gpus.json"]
REGISTRY = "127.0.0.1:5000"
BASE_REPOSITORY = "labctl/base"
BASE_TAG = "bookworm"
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    ]
)
COMPOSE_PORT = 18431  # inside labb
FORWARD_SERVER_PORT = 18433  # inside labb
IN_CI = os.environ.get("CI") == "true"


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true and {reason}: CI must provision it (make remote-lab)", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}; run `make remote-lab` (as root) to test the SSH-reached host")


def run(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        list(args), capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


def remote_docker(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run("docker", "-H", DOCKER_URL, *args, timeout=timeout, check=check)


def http_get(url: str, timeout: float = 3) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
    return body.decode()


def serves_token(url: str, token: str) -> bool:
    try:
        return http_get(url, timeout=2).strip() == token
    except OSError:
        return False


def free_loopback_port() -> int:
    for port in range(18440, 18500):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 18440-18499 on 127.0.0.1")


def registry_digest(repository: str, reference: str) -> str | None:
    request = urllib.request.Request(
        f"http://{REGISTRY}/v2/{repository}/manifests/{reference}", method="HEAD", headers={"Accept": MANIFEST_TYPES}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            digest: str | None = response.headers.get("Docker-Content-Digest")
            return digest
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


@pytest.fixture(scope="module")
def labb() -> str:
    if shutil.which("docker") is None or shutil.which("ssh") is None:
        _missing("the docker CLI or the ssh client is not installed")
    if not LABB_SOCKET.is_socket():
        _missing(f"the remote lab is not up ({LABB_SOCKET} is absent)")
    probe = run("ssh", SSH_TARGET, "true", timeout=20, check=False)
    if probe.returncode != 0:
        _missing(f"`ssh {SSH_TARGET} true` fails ({probe.stderr.strip()[-200:]})")
    return DOCKER_URL


@pytest.fixture(scope="module")
def base_image(labb: str) -> str:
    """labctl/base:bookworm from the lab registry, by digest (pushed from the main daemon if absent)."""
    try:
        digest = registry_digest(BASE_REPOSITORY, BASE_TAG)
    except OSError as exc:
        _missing(f"the lab registry on {REGISTRY} does not answer ({exc})")
    if digest is None:
        if run("docker", "image", "inspect", f"{BASE_REPOSITORY}:{BASE_TAG}", check=False).returncode != 0:
            _missing(f"the base image {BASE_REPOSITORY}:{BASE_TAG} is absent (make docker-lab)")
        pushed = f"{REGISTRY}/{BASE_REPOSITORY}:{BASE_TAG}"
        run("docker", "tag", f"{BASE_REPOSITORY}:{BASE_TAG}", pushed)
        run("docker", "push", "-q", pushed, timeout=300)
        digest = registry_digest(BASE_REPOSITORY, BASE_TAG)
        assert digest, f"pushed {pushed} but the registry has no manifest for it"
    return f"{REGISTRY}/{BASE_REPOSITORY}@{digest}"


def test_docker_info_over_ssh_is_the_labb_daemon(labb: str) -> None:
    info = json.loads(remote_docker("info", "--format", "{{json .}}").stdout)
    assert info["DockerRootDir"] == "/var/lib/labctl-labb/docker"
    local = json.loads(run("docker", "info", "--format", "{{json .}}").stdout)
    assert local["ID"] != info["ID"], "ssh://labctl-remote@10.201.0.2 answered with the main daemon"


def test_nvidia_smi_over_ssh_lists_the_simulated_gpu(labb: str) -> None:
    out = run("ssh", SSH_TARGET, *NVIDIA_SMI, "--query-gpu=index,name", "--format=csv,noheader", timeout=20).stdout
    assert out.strip().splitlines() == ["0, Simulated NVIDIA H100 80GB HBM3"]


def test_registry_pull_by_digest_inside_labb(labb: str) -> None:
    """A fresh, unique image pushed through the main namespace's registry is pulled by digest on labb."""
    token = uuid.uuid4().hex[:12]
    repository = "remotetest/tiny"  # one repository; the token in the layer makes each digest new
    tagged = f"{REGISTRY}/{repository}:{token}"
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        data = f"remotetest {token}\n".encode()
        member = tarfile.TarInfo("remotetest.txt")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    proc = subprocess.run(["docker", "import", "-", tagged], input=layer.getvalue(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    digest = None
    try:
        run("docker", "push", "-q", tagged, timeout=120)
        digest = registry_digest(repository, token)
        assert digest and digest.startswith("sha256:")
        pinned = f"{REGISTRY}/{repository}@{digest}"
        assert remote_docker("image", "inspect", pinned, check=False).returncode != 0
        remote_docker("pull", "-q", pinned, timeout=120)
        repo_digests = json.loads(remote_docker("image", "inspect", "--format", "{{json .RepoDigests}}", pinned).stdout)
        assert pinned in repo_digests
    finally:
        remote_docker("image", "rm", "-f", f"{REGISTRY}/{repository}@{digest}" if digest else tagged, check=False)
        run("docker", "image", "rm", "-f", tagged, check=False)
        if digest:
            request = urllib.request.Request(f"http://{REGISTRY}/v2/{repository}/manifests/{digest}", method="DELETE")
            # a registry without delete enabled keeps a few bytes; nothing else depends on them
            with contextlib.suppress(urllib.error.HTTPError):
                urllib.request.urlopen(request, timeout=5).close()


def compose_text(image: str, port: int, token: str) -> str:
    serve = (
        f"mkdir -p /srv && echo {token} > /srv/token && "
        f"exec python3 -m http.server {port} --bind 127.0.0.1 --directory /srv"
    )
    return f"""services:
  web:
    image: {image}
    network_mode: host
    stop_signal: SIGKILL
    command: ["sh", "-c", "{serve}"]
    healthcheck:
      test: ["CMD", "python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/token')"]
      interval: 1s
      timeout: 3s
      retries: 30
"""


def project_containers(project: str, *docker_args: str) -> list[str]:
    out = run(
        "docker",
        *docker_args,
        "ps",
        "-a",
        "--filter",
        f"label=com.docker.compose.project={project}",
        "--format",
        "{{.Names}}",
    ).stdout
    return out.split()


def test_compose_up_and_down_over_ssh_with_host_networking(base_image: str, tmp_path: Path) -> None:
    project = f"remotetest-{uuid.uuid4().hex[:8]}"
    token = uuid.uuid4().hex
    compose_file = tmp_path / "compose.yaml"
    compose_file.write_text(compose_text(base_image, COMPOSE_PORT, token))
    compose = ["docker", "compose", "-p", project, "-f", str(compose_file)]
    env = {"DOCKER_HOST": DOCKER_URL}
    try:
        run(*compose, "up", "-d", "--wait", env=env, timeout=180)
        assert project_containers(project, "-H", DOCKER_URL) == [f"{project}-web-1"]
        assert project_containers(project) == [], "the project started on the main daemon"
        # Bound to labb's loopback: the main namespace's 127.0.0.1 does not reach it.
        assert not serves_token(f"http://127.0.0.1:{COMPOSE_PORT}/token", token)
        inside = run(
            "ssh",
            SSH_TARGET,
            "python3",
            "-c",
            f"\"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{COMPOSE_PORT}/token').read().decode())\"",
            timeout=20,
        ).stdout
        assert inside.strip() == token
    finally:
        down = run(*compose, "down", "--remove-orphans", env=env, timeout=120, check=False)
    assert down.returncode == 0, down.stderr
    assert project_containers(project, "-H", DOCKER_URL) == []


@pytest.fixture
def labb_server(base_image: str) -> Iterator[str]:
    """A server bound to 127.0.0.1 inside labb; yields the token it serves at /token."""
    name = f"remotetest-fwd-{uuid.uuid4().hex[:8]}"
    token = uuid.uuid4().hex
    remote_docker(
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "host",
        base_image,
        "sh",
        "-c",
        f"mkdir -p /srv && echo {token} > /srv/token && "
        f"exec python3 -m http.server {FORWARD_SERVER_PORT} --bind 127.0.0.1 --directory /srv",
        timeout=180,
    )
    try:
        yield token
    finally:
        remote_docker("rm", "-f", name, check=False)


def test_ssh_forward_reaches_a_server_on_labb_loopback(labb_server: str) -> None:
    port = free_loopback_port()
    tunnel = subprocess.Popen(
        [
            "ssh",
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-L",
            f"127.0.0.1:{port}:127.0.0.1:{FORWARD_SERVER_PORT}",
            SSH_TARGET,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        body, last_error = "", ""
        while time.monotonic() < deadline and tunnel.poll() is None:
            try:
                body = http_get(f"http://127.0.0.1:{port}/token")
                if body.strip() == labb_server:
                    break
            except OSError as exc:
                last_error = str(exc)
            time.sleep(0.2)
        assert tunnel.poll() is None, f"ssh -L exited: {tunnel.stderr.read() if tunnel.stderr else ''}"
        assert body.strip() == labb_server, f"no answer through the forward ({last_error})"
    finally:
        tunnel.terminate()
        try:
            tunnel.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a loaded machine: the assertion above says what went wrong
            tunnel.kill()
            tunnel.wait(timeout=10)


def test_simulated_gpu_device_request_starts_on_labb(base_image: str) -> None:
    name = f"remotetest-gpu-{uuid.uuid4().hex[:8]}"
    out = remote_docker(
        "run",
        "--rm",
        "--name",
        name,
        "--network",
        "host",
        "--gpus",
        "device=0",
        base_image,
        "sh",
        "-c",
        "echo $NVIDIA_VISIBLE_DEVICES",
        timeout=120,
    ).stdout
    assert out.strip() == "0"
