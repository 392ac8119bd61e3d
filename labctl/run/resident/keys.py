"""API keys for resident deployments: generated or read from a file, stored under labctl's state folder
(never world-readable), handed to the engine as a read-only mounted file. Never in compose files, records
or argv."""

from __future__ import annotations

import grp
import hashlib
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from labctl.catalog.sourcefile import read_bounded
from labctl.errors import BadInput, LabctlError
from labctl.host.files.atomic import write_atomically

MAX_KEY_FILE = 64 * 1024  # 100 keys of a few hundred characters each
PREVIOUS = "api_key.previous"
# Behind labctl's proxy the engine has a key of its own that nobody is given: the proxy sends it upstream for
# a request that carried one of the keys in api_key, so a rotation changes only what the proxy accepts.
ENGINE_KEY = "engine_key"
MAX_KEYS = 100


def generate_keys(count: int) -> list[str]:
    if not 1 <= count <= MAX_KEYS:
        raise BadInput(f"--keys {count}: give a number of keys from 1 to {MAX_KEYS}.")
    return [f"sk-labctl-{secrets.token_urlsafe(32)}" for _ in range(count)]


def read_key_file(path_text: str) -> list[str]:
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise BadInput(f"--key-file {path}: no such file. Write one key per line into it, then chmod 600 it.")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise BadInput(f"--key-file {path}: readable by other users (mode {mode:04o}). Fix it with: chmod 600 {path}")
    keys = [
        line.strip()
        for line in read_bounded(path, f"--key-file {path}", MAX_KEY_FILE).decode("utf-8", "replace").splitlines()
        if line.strip()
    ]
    if not keys:
        raise BadInput(f"--key-file {path}: the file is empty. Write one key per line into it.")
    if any(len(k) < 16 or any(c.isspace() for c in k) for k in keys):
        raise BadInput(f"--key-file {path}: each key must be one word of at least 16 characters.")
    return keys


def fingerprint(key: str) -> str:
    """Safe to record: tells keys apart (and shows a rotation) without revealing them."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()[:12]


def key_group() -> int:
    """The group that may read resident keys: the docker group when this user is in it (its members can
    read any container's files anyway, `docker exec` or `docker cp`), else this user's own group."""
    try:
        docker = grp.getgrnam("docker")
    except KeyError:
        return os.getegid()
    if os.geteuid() == 0 or docker.gr_gid in os.getgroups() or docker.gr_gid == os.getegid():
        return docker.gr_gid
    return os.getegid()


@dataclass(frozen=True)
class KeyAccess:
    """Where a run's key file is, and the group the engine's container joins to read it (None when the
    file was handed to the image's own user)."""

    folder: Path
    group: int | None


class KeyStore:
    """<home>/.state/keys/<run_id>/api_key. Never world-readable. The engine reads it as the image's user:
    root gives a numeric image user the file itself (0600); otherwise (any member of the docker group, or an
    image whose user is a name) the file is 0640 in the key group, which the container joins (group_add)."""

    def __init__(self, home: Path) -> None:
        self.root = home / ".state" / "keys"

    def folder(self, run_id: str) -> Path:
        return self.root / run_id

    def write(
        self, run_id: str, keys: list[str], image_ids: tuple[int, int] | None = None, name: str = "api_key"
    ) -> KeyAccess:
        try:
            return self._write(run_id, keys, image_ids, name)
        except PermissionError as exc:
            raise LabctlError(
                f"cannot write the API key file under {self.root} ({exc.strerror}: {exc.filename}): "
                "the key store belongs to another user. Use a --home you can write, or ask its owner."
            ) from None

    def _write(self, run_id: str, keys: list[str], image_ids: tuple[int, int] | None, name: str) -> KeyAccess:
        group = key_group()
        for shared in (self.root.parent, self.root):  # members of the key group add and remove their runs' keys
            shared.mkdir(mode=0o770, parents=True, exist_ok=True)
            if shared.stat().st_uid == os.geteuid():
                os.chown(shared, -1, group)
                os.chmod(shared, 0o770)
        folder = self.folder(run_id)
        folder.mkdir(mode=0o770, exist_ok=True)
        path = folder / name
        text = "\n".join(keys) + "\n"
        try:
            before = path.stat()  # a rotation keeps the engine's way of reading its key
        except FileNotFoundError:
            before = None
        if before is None or os.geteuid() in (0, folder.stat().st_uid):
            os.chown(folder, -1, group)
            os.chmod(folder, 0o770)
        if before is not None and os.geteuid() == 0:
            mode = stat.S_IMODE(before.st_mode) & 0o640
            write_atomically(path, text, mode=mode, owner=(before.st_uid, before.st_gid))
            return KeyAccess(folder, before.st_gid if mode & 0o040 else None)
        if before is not None and before.st_uid != os.geteuid() and not before.st_mode & stat.S_IRGRP:
            raise LabctlError(
                f"the key file of run {run_id} belongs to uid {before.st_uid}, the engine's own user: "
                "only root can replace it (sudo labctl rotate-key ...)."
            )
        if os.geteuid() == 0 and image_ids is not None:
            # The image's own user gets the file, nobody else; the folder stays the group's so any member can
            # remove it when the run stops.
            os.chown(folder, image_ids[0], group)
            write_atomically(path, text, mode=0o600, owner=image_ids)
            return KeyAccess(folder, None)
        write_atomically(path, text, mode=0o640, owner=(-1, group))
        return KeyAccess(folder, group)

    def read(self, run_id: str) -> list[str]:
        path = self.folder(run_id) / "api_key"
        try:
            exists = path.is_file()
        except PermissionError:
            exists = True  # read_bounded says what is wrong
        if not exists:
            raise BadInput(f"run {run_id} has no API key under {self.root} (not a resident deployment with keys).")
        text = read_bounded(path, f"the API key file of run {run_id} ({path})", MAX_KEY_FILE).decode("utf-8", "replace")
        return [line for line in text.splitlines() if line]

    def keep_previous(self, run_id: str, keys: list[str]) -> None:
        """The keys a rotation replaces, kept until the engine runs with the new ones (the undo of a rotation
        cut short); readable by the key group, like the key file."""
        write_atomically(self.folder(run_id) / PREVIOUS, "\n".join(keys) + "\n", mode=0o640, owner=(-1, key_group()))

    def previous(self, run_id: str) -> list[str]:
        path = self.folder(run_id) / PREVIOUS
        if not path.is_file():
            return []
        text = read_bounded(path, f"the previous API keys of run {run_id} ({path})", MAX_KEY_FILE)
        return [line for line in text.decode("utf-8", "replace").splitlines() if line]

    def drop_previous(self, run_id: str) -> None:
        (self.folder(run_id) / PREVIOUS).unlink(missing_ok=True)

    def remove(self, run_id: str) -> None:
        folder = self.folder(run_id)
        try:
            for child in folder.glob("*"):
                child.unlink()
            if folder.is_dir():
                folder.rmdir()
        except PermissionError as exc:
            raise LabctlError(
                f"cannot remove the keys of run {run_id} ({exc.filename}): ask the key store's owner to delete {folder}."
            ) from None
