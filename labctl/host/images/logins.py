"""The registry logins Docker already has, read the way the docker CLI reads them: `$DOCKER_CONFIG/config.json`
(default ~/.docker/config.json), its `credHelpers` entry for the registry, else its `credsStore`, else the
registry's `auths` entry (what `docker login` writes without a helper). A helper is asked as Docker asks it:
`docker-credential-NAME get` with the registry on stdin and the login on stdout, so the secret is never in an
argv. python-on-whales drives `docker login` but reads no credential back, hence this file.

A login is used only for the registry it was stored for (and that registry's token service); it is never
printed, logged or recorded: `Login`'s repr hides the secret."""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from labctl.errors import LabctlError

MAX_CONFIG_BYTES = 1024 * 1024
MAX_HELPER_BYTES = 64 * 1024
HELPER_TIMEOUT_S = 30
_HELPER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")


@dataclass(frozen=True)
class Login:
    username: str
    secret: str = field(repr=False)
    source: str  # where Docker keeps it: "config.json" or "credential helper NAME"


def config_path() -> Path:
    """Docker's client configuration, as the docker CLI finds it."""
    folder = os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
    return Path(folder) / "config.json"


def _keys(host: str) -> tuple[str, ...]:
    """The spellings `docker login HOST` may have stored the registry under."""
    if host in DOCKER_HUB_KEYS:
        return DOCKER_HUB_KEYS
    return (host, f"https://{host}", f"http://{host}", f"https://{host}/v1/", f"https://{host}/v2/")


def login_for(host: str) -> Login | None:
    """The login Docker has for a registry host (as written in an image reference), or None."""
    path = config_path()
    try:
        raw = path.read_bytes()[: MAX_CONFIG_BYTES + 1]
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LabctlError(f"cannot read Docker's client configuration {path}: {exc.strerror or exc}.") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise LabctlError(f"Docker's client configuration {path} is larger than 1 MiB; labctl does not read it.")
    try:
        config = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise LabctlError(
            f"Docker's client configuration {path} is not valid JSON; fix it (docker login rewrites it)."
        ) from None
    if not isinstance(config, dict):
        return None
    keys = _keys(host)
    helpers = config.get("credHelpers")
    if isinstance(helpers, dict):
        for key in keys:
            if isinstance(helpers.get(key), str):
                return _ask_helper(helpers[key], key, host)
    if isinstance(config.get("credsStore"), str) and config["credsStore"]:
        found = _ask_helper(config["credsStore"], keys[0], host, missing_ok=True)
        if found is not None:
            return found
    auths = config.get("auths")
    if isinstance(auths, dict):
        for key in keys:
            entry = auths.get(key)
            if isinstance(entry, dict):
                return _from_auths(entry, path, host)
    return None


def _from_auths(entry: dict[str, object], path: Path, host: str) -> Login | None:
    encoded = entry.get("auth")
    if not isinstance(encoded, str) or not encoded:
        return None  # an entry a credsStore keeps the secret of: asked above
    try:
        username, sep, secret = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        sep = ""
    if not sep or not username:
        raise LabctlError(f"Docker's login for {host} in {path} is not user:password; run `docker login {host}` again.")
    return Login(username, secret, "config.json")


def _ask_helper(name: str, key: str, host: str, missing_ok: bool = False) -> Login | None:
    if not _HELPER_NAME.fullmatch(name):
        raise LabctlError(f"Docker's configuration names a credential helper {name[:64]!r} that is not a plain name.")
    program = f"docker-credential-{name}"
    if shutil.which(program) is None:
        raise LabctlError(
            f"Docker's configuration asks the credential helper {program} for {host}, and it is not on the PATH."
        )
    try:
        done = subprocess.run(
            [program, "get"], input=key.encode(), capture_output=True, timeout=HELPER_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise LabctlError(
            f"the credential helper {program} did not answer for {host} in {HELPER_TIMEOUT_S} s."
        ) from None
    if done.returncode != 0:
        if missing_ok or b"credentials not found" in done.stdout + done.stderr:
            return None
        said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()[:1]
        raise LabctlError(
            f"the credential helper {program} failed for {host}: {said[0][:200] if said else 'no detail'}."
        )
    try:
        answer = json.loads(done.stdout[:MAX_HELPER_BYTES])
    except (ValueError, UnicodeDecodeError):
        answer = None
    username = answer.get("Username") if isinstance(answer, dict) else None
    secret = answer.get("Secret") if isinstance(answer, dict) else None
    if not isinstance(username, str) or not isinstance(secret, str) or not secret:
        raise LabctlError(f"the credential helper {program} answered for {host} without a Username and Secret.")
    return Login(username, secret, f"credential helper {name}")
