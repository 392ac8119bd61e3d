"""The auth-proxy image on its own (`make auth-proxy-image`): a key matches exactly (case, and the pattern
characters . and + taken literally), the scheme word may be any case, the engine's own key replaces the
client's upstream, a reload takes new keys and a key file it cannot use leaves the old keys in place.
The upstream is a tiny HTTP server that echoes the Authorization header it got."""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers.harness_proc import free_port
from helpers.support import IN_CI, REPO

from labctl.run.resident.lockdown import AUTH_PROXY_IMAGE

pytestmark = pytest.mark.docker

ECHO = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (self.headers.get("Authorization") or "-").encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Path", self.path); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
KEY = "sk-labctl-Ab.c+d_0123456789"
ENGINE_KEY = "sk-engine-0123456789abcdef"


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    if subprocess.run(["docker", "image", "inspect", AUTH_PROXY_IMAGE], capture_output=True).returncode != 0:
        if IN_CI:
            pytest.fail(f"CI=true and {AUTH_PROXY_IMAGE} is missing: run `make auth-proxy-image`", pytrace=False)
        pytest.skip(f"SKIPPED LOUDLY: {AUTH_PROXY_IMAGE} is missing; run `make auth-proxy-image`")
    keys = tmp_path_factory.mktemp("keys")
    (keys / "api_key").write_text(f"{KEY}\n")
    (keys / "engine_key").write_text(f"{ENGINE_KEY}\n")
    upstream_port, port = free_port(), free_port()
    upstream = subprocess.Popen([sys.executable, "-c", ECHO, str(upstream_port)])
    name = f"labctl-test-auth-proxy-{uuid.uuid4().hex[:8]}"
    argv = ["docker", "run", "-d", "--name", name, "--network", "host", "-v", f"{keys}:/run/labctl:ro"]
    subprocess.run([*argv, AUTH_PROXY_IMAGE, "serve", f"127.0.0.1:{port}", str(upstream_port), "/open"], check=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(base + "/open", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield base, keys, name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        upstream.terminate()
        upstream.wait()


def status(base: str, authorization: str | None, path: str = "/x") -> tuple[int, str]:
    headers = {"Authorization": authorization} if authorization else {}
    answer = httpx.get(base + path, headers=headers, timeout=5)
    return answer.status_code, answer.text


def test_keys_match_exactly_and_the_engine_gets_its_own(proxied: tuple[str, Path, str]) -> None:
    base, _, _ = proxied
    assert status(base, f"Bearer {KEY}") == (200, f"Bearer {ENGINE_KEY}")
    assert status(base, f"bearer {KEY}")[0] == 200
    for wrong in (None, "Bearer", f"Bearer {KEY.upper()}", f"Bearer {KEY.replace('.', 'X')}", f"Bearer {KEY}x"):
        assert status(base, wrong)[0] == 401, wrong
    assert status(base, f"Bearer {KEY.replace('+', '')}")[0] == 401  # '+' is no pattern quantifier here
    assert status(base, None, "/open") == (200, "-")  # the open path passes as it came
    assert status(base, None, "/open/more")[0] == 401


# Paths that normalise onto the open route (or onto the engine's own open routes) but are not it, as written.
WALKS = (
    "/x/../open", "/open/../open", "/open/./", "/open/.", "/open/..", "/x/%2e%2e/open", "/x/%2E%2e/open",
    "/%2e%2e/open", "//open", "/x//../open", "/x%2f..%2fopen", "/x%2F..%2Fopen", "/x/..%2fopen", "/x\\..\\open",
    "/x%5c..%5copen", "/./open", "/open%2f", "/OPEN", "/Open/../open",
)  # fmt: skip


def raw_get(base: str, path: str, authorization: str | None = None) -> tuple[int, str | None, str]:
    """GET the path exactly as written (an HTTP client library would normalise the dot segments first)."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("GET", path, headers={"Authorization": authorization} if authorization else {})
        answer = connection.getresponse()
        return answer.status, answer.getheader("X-Path"), answer.read().decode(errors="replace")
    finally:
        connection.close()


def test_the_path_the_key_check_sees_is_the_path_the_engine_gets(proxied: tuple[str, Path, str]) -> None:
    base, _, _ = proxied
    assert raw_get(base, "/open")[:2] == (200, "/open")
    assert raw_get(base, "/open?probe=1")[:2] == (200, "/open?probe=1")
    for path in WALKS:
        code, forwarded, _ = raw_get(base, path)
        # Refused without a key: nothing the engine may route elsewhere than the open path gets through.
        assert code in (400, 401) and forwarded is None, (path, code, forwarded)
    for path in ("/x/../y", "/v1//models", "/a/%2e%2e/b"):  # with the key too: what nginx matched is what goes on
        code, forwarded, body = raw_get(base, path, f"Bearer {KEY}")
        assert code == 400 and forwarded is None and "dot segments" in body, (path, code, body)
    assert raw_get(base, "/v1/models?next=//a/../b", f"Bearer {KEY}")[:2] == (200, "/v1/models?next=//a/../b")


def test_reload_takes_new_keys_and_keeps_the_old_on_a_bad_file(proxied: tuple[str, Path, str]) -> None:
    base, keys, name = proxied
    (keys / "api_key").write_text("sk-second-0123456789abcdef\n")
    assert subprocess.run(["docker", "exec", name, "labctl-auth-proxy", "reload"], capture_output=True).returncode == 0
    deadline = time.monotonic() + 10
    while status(base, f"Bearer {KEY}")[0] != 401:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert status(base, "Bearer sk-second-0123456789abcdef")[0] == 200
    (keys / "api_key").write_text('sk-"quoted";0123456789\n')
    bad = subprocess.run(["docker", "exec", name, "labctl-auth-proxy", "reload"], capture_output=True, text=True)
    assert bad.returncode == 78 and "refusing to serve" in bad.stderr and "quoted" not in bad.stderr
    assert status(base, "Bearer sk-second-0123456789abcdef")[0] == 200


def test_the_image_script_is_idempotent() -> None:
    done = subprocess.run(["bash", str(REPO / "scripts" / "auth-proxy-image.sh")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    again = subprocess.run(["bash", str(REPO / "scripts" / "auth-proxy-image.sh")], capture_output=True, text=True)
    assert again.returncode == 0 and "is up to date" in again.stdout
