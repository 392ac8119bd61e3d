"""labctl pin through a registry that demands a login: Debian's docker-registry (the lab registry's program) with
htpasswd authentication turned on, on a loopback port of this test's own. An image is pushed with `docker login`
and `docker push` into a Docker client configuration of the test's own (DOCKER_CONFIG), and labctl resolves its
digest with the login Docker has: from config.json as `docker login` wrote it, or from a credential helper. No
login, or a wrong one, is one line naming the `docker login` to run; the secret is never printed or written."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from helpers.harness_proc import free_port
from helpers.support import run_labctl

pytestmark = [pytest.mark.docker, pytest.mark.own_containers]

USER, SECRET = "alice", "s3cret-labctl-test"


@dataclass(frozen=True)
class Private:
    host: str  # 127.0.0.1:PORT
    image: str  # host/team/private:1
    digest: str
    docker_config: Path  # where `docker login` wrote the login


def _bcrypt(secret: str) -> str:
    with warnings.catch_warnings():  # crypt is deprecated, and the only bcrypt this machine's Python has
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

        return crypt.crypt(secret, crypt.mksalt(crypt.METHOD_BLOWFISH))


def _docker(config: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["docker", "--config", str(config), *args], input=stdin, capture_output=True, text=True)
    assert done.returncode == 0, f"docker {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Private]:
    program = shutil.which("docker-registry")
    if program is None or shutil.which("docker") is None:
        pytest.fail("docker-registry and docker are provisioned by make docker-lab", pytrace=False)
    root = tmp_path_factory.mktemp("private-registry")
    (root / "htpasswd").write_text(f"{USER}:{_bcrypt(SECRET)}\n")
    port = free_port()
    (root / "config.yml").write_text(
        "version: 0.1\nlog: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}\n"
        f"http: {{addr: 127.0.0.1:{port}}}\n"
        f"auth: {{htpasswd: {{realm: labctl-test, path: {root / 'htpasswd'}}}}}\n"
    )
    server = subprocess.Popen(
        [program, "serve", str(root / "config.yml")], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    host, image = f"127.0.0.1:{port}", f"127.0.0.1:{port}/team/private:1"
    config = root / "docker-config"
    config.mkdir()
    try:
        for _ in range(100):
            try:
                if httpx.get(f"http://{host}/v2/", timeout=1).status_code == 401:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        context = root / "image"
        context.mkdir()
        (context / "payload").write_bytes(os.urandom(1024))
        (context / "Dockerfile").write_text("FROM scratch\nCOPY payload /payload\n")
        _docker(config, "build", "-q", "-t", image, str(context))
        _docker(config, "login", "-u", USER, "--password-stdin", host, stdin=SECRET)
        _docker(config, "push", "-q", image)
        repo_digests = json.loads(_docker(config, "image", "inspect", "--format", "{{json .RepoDigests}}", image))
        (digest,) = [d.split("@", 1)[1] for d in repo_digests if d.startswith(f"{host}/team/private@")]
        yield Private(host, image, digest, config)
    finally:
        subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True)
        server.terminate()
        server.wait(30)


def _profile(lab: Path) -> Path:
    return lab / "engines" / "harness" / "profiles" / "smoke.yaml"


def _point_at(lab: Path, image: str) -> str:
    path = _profile(lab)
    text = path.read_text()
    line = next(line for line in text.splitlines() if line.startswith("image: "))
    path.write_text(text.replace(line, f"image: {image}"))
    return path.read_text()


def _pin(lab: Path, tmp_path: Path, docker_config: Path, path: str = "") -> tuple[int, str, str]:
    env = {"LABCTL_HOME": str(tmp_path / "home"), "DOCKER_CONFIG": str(docker_config)}
    if path:
        env["PATH"] = f"{path}:{os.environ['PATH']}"
    result = run_labctl("pin", "harness", "--profile", "smoke", "--json", lab=lab, env=env)
    assert SECRET not in result.stdout + result.stderr
    return result.code, result.stdout, result.stderr


def test_pin_resolves_a_private_image_with_the_login_docker_login_wrote(
    lab: Path, tmp_path: Path, private: Private
) -> None:
    _point_at(lab, private.image)
    code, out, err = _pin(lab, tmp_path, private.docker_config)
    assert code == 0, err
    assert json.loads(out)["digest"] == private.digest
    pinned = _profile(lab).read_text()
    assert f"image: {private.image}@{private.digest}" in pinned and SECRET not in pinned


def test_without_a_login_pin_names_the_docker_login_to_run_and_writes_nothing(
    lab: Path, tmp_path: Path, private: Private
) -> None:
    before = _point_at(lab, private.image)
    empty = tmp_path / "no-logins"
    empty.mkdir()
    code, _out, err = _pin(lab, tmp_path, empty)
    assert code == 1 and len(err.splitlines()) == 1, err
    assert (
        f"refused anonymous access (HTTP 401) and Docker has no login for it: run `docker login {private.host}`" in err
    )
    assert _profile(lab).read_text() == before


def test_a_wrong_login_is_named_with_its_user_and_where_docker_keeps_it(
    lab: Path, tmp_path: Path, private: Private
) -> None:
    before = _point_at(lab, private.image)
    stale = tmp_path / "stale"
    stale.mkdir()
    auth = base64.b64encode(f"{USER}:not-the-password".encode()).decode()
    (stale / "config.json").write_text(json.dumps({"auths": {private.host: {"auth": auth}}}))
    code, _out, err = _pin(lab, tmp_path, stale)
    assert code == 1 and "not-the-password" not in err, err
    assert f"refused the login Docker has for it (user '{USER}', from config.json; HTTP 401)" in err
    assert f"run `docker login {private.host}` again" in err
    assert _profile(lab).read_text() == before


def test_a_credential_helper_is_asked_as_docker_asks_it(lab: Path, tmp_path: Path, private: Private) -> None:
    _point_at(lab, private.image)
    helpers = tmp_path / "bin"
    helpers.mkdir()
    asked = tmp_path / "asked"
    helper = helpers / "docker-credential-labtest"
    helper.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = get ] || exit 1\ncat > {asked}\n'
        f"printf '%s' '{json.dumps({'ServerURL': private.host, 'Username': USER, 'Secret': SECRET})}'\n"
    )
    helper.chmod(0o755)
    config = tmp_path / "with-helper"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"credHelpers": {private.host: "labtest"}}))
    code, out, err = _pin(lab, tmp_path, config, path=str(helpers))
    assert code == 0, err
    assert json.loads(out)["digest"] == private.digest
    assert asked.read_text() == private.host  # the registry on stdin; the secret came back on stdout, never argv
