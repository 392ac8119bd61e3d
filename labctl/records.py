"""Run records: runs/<run_id>/record.json (written atomically), the exact compose file, the engine's
saved logs and an events log. A record is what anyone needs to see, and re-run, what ran."""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import re
import secrets
import socket
from pathlib import Path
from typing import Any

from labctl.errors import BadInput
from labctl.lab import Lab
from labctl.render import write_atomically

SCHEMA_VERSION = 1
_RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")
# Secret-looking values never reach a record, whatever field they hide in.
_SECRET_NAMES = re.compile(r"(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def host_name() -> str:
    return socket.gethostname()


def home_dir(lab: Lab, explicit: str | None = None) -> Path:
    """Where runs/ and labctl's state live: --home / LABCTL_HOME, else the lab folder."""
    chosen = explicit or os.environ.get("LABCTL_HOME")
    return Path(chosen).expanduser().resolve() if chosen else lab.root


def is_run_id(text: str) -> bool:
    return _RUN_ID.match(text) is not None


class Runs:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.root = home / "runs"

    def dir(self, run_id: str) -> Path:
        if not _RUN_ID.match(run_id):
            raise BadInput(f"{run_id!r} is not a run id (like 20261203-015815-a1b2c3). List them with `labctl runs`.")
        return self.root / run_id

    def record_path(self, run_id: str) -> Path:
        return self.dir(run_id) / "record.json"

    def exists(self, run_id: str) -> bool:
        return self.record_path(run_id).is_file()

    def load(self, run_id: str) -> dict[str, Any]:
        path = self.record_path(run_id)
        if not path.is_file():
            raise BadInput(f"no run {run_id} under {self.root}. List them with `labctl runs` (or check LABCTL_HOME).")
        try:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise BadInput(f"{path}: not valid JSON ({exc}).") from None
        return data

    def save(self, record: dict[str, Any]) -> Path:
        path = self.record_path(record["run_id"])
        write_atomically(path, json.dumps(redact(record), indent=2, sort_keys=False) + "\n")
        return path

    def update(self, run_id: str, **changes: Any) -> dict[str, Any]:
        record = self.load(run_id)
        record.update(changes)
        self.save(record)
        return record

    def event(self, run_id: str, kind: str, **fields: Any) -> None:
        line = json.dumps(redact({"at": now(), "event": kind, "by": current_user(), **fields}))
        path = self.dir(run_id) / "events.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    def all_ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.parent.name for p in self.root.glob("*/record.json") if _RUN_ID.match(p.parent.name))


def redact(value: Any, key: str = "") -> Any:
    """Values under secret-looking keys become '<redacted>'; names (lists of strings) stay."""
    if isinstance(value, dict):
        return {k: redact(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if isinstance(value, str) and key and _SECRET_NAMES.search(key) and not key.endswith(("_names", "_env", "_kind", "_fingerprints")):
        return "<redacted>" if value else value
    return value
