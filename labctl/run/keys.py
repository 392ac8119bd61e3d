"""API keys for resident deployments: generated or read from a file, stored 0600 under labctl's state
folder, handed to the engine as a read-only mounted file. Never in compose files, records or argv."""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from pathlib import Path

from labctl.errors import BadInput
from labctl.host.files import write_atomically


def generate_keys(count: int) -> list[str]:
    if not 1 <= count <= 100:
        raise BadInput(f"--keys {count}: give a number of keys from 1 to 100.")
    return [f"sk-labctl-{secrets.token_urlsafe(32)}" for _ in range(count)]


def read_key_file(path_text: str) -> list[str]:
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise BadInput(f"--key-file {path}: no such file. Write one key per line into it, then chmod 600 it.")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise BadInput(f"--key-file {path}: readable by other users (mode {mode:04o}). Fix it with: chmod 600 {path}")
    keys = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not keys:
        raise BadInput(f"--key-file {path}: the file is empty. Write one key per line into it.")
    if any(len(k) < 16 or any(c.isspace() for c in k) for k in keys):
        raise BadInput(f"--key-file {path}: each key must be one word of at least 16 characters.")
    return keys


def fingerprint(key: str) -> str:
    """Safe to record: tells keys apart (and shows a rotation) without revealing them."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()[:12]


class KeyStore:
    def __init__(self, home: Path) -> None:
        self.root = home / ".state" / "keys"

    def folder(self, run_id: str) -> Path:
        return self.root / run_id

    def write(self, run_id: str, keys: list[str], owner_uid: int | None = None, owner_gid: int | None = None) -> Path:
        """One key per line in <state>/keys/<run_id>/api_key, readable only by the engine's user."""
        folder = self.folder(run_id)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.root.parent, 0o700)
        os.chmod(folder, 0o700)
        path = folder / "api_key"
        write_atomically(path, "\n".join(keys) + "\n", mode=0o600)
        if owner_uid is not None and os.geteuid() == 0:
            # The engine reads the file as the image's user (e.g. nobody): give it the file, nobody else.
            os.chown(folder, owner_uid, owner_gid if owner_gid is not None else owner_uid)
            os.chown(path, owner_uid, owner_gid if owner_gid is not None else owner_uid)
        return path

    def read(self, run_id: str) -> list[str]:
        path = self.folder(run_id) / "api_key"
        if not path.is_file():
            raise BadInput(f"run {run_id} has no API key under {self.root} (not a resident deployment with keys).")
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line]

    def remove(self, run_id: str) -> None:
        folder = self.folder(run_id)
        for child in folder.glob("*"):
            child.unlink()
        if folder.is_dir():
            folder.rmdir()
