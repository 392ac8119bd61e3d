"""What this home itself put on a host, written when it happened: HOME/.state/acquired.jsonl, one JSON line per
image labctl pulled, built or copied, per model snapshot it fetched and per engine folder it built — and, as
`found`, what a run used that was already there. `labctl gc` offers only what this file says labctl acquired
(a run record is no evidence of that: it only says what a run used).

Lines are only ever appended, each in one write, and the file is group-writable like the rest of a shared
home (and, like all of .state, closed to other users). A line that cannot be read is reported and never counts as an acquisition."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from labctl.catalog.sourcefile import read_bounded
from labctl.errors import BadInput
from labctl.host.files.atomic import naming
from labctl.host.identity import current_user
from labctl.run.records.record import now

MAX_LEDGER_BYTES = 32 * 1024 * 1024  # a line per pull, fetch or build: years of a busy home
MAX_LINE_BYTES = 16 * 1024
LEDGER_MODE = 0o660  # the home's group (a shared home's members) appends; other users read nothing in .state
STATE_DIR_MODE = 0o2770
_IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}\Z")


class Action(StrEnum):
    PULLED = "pulled"
    BUILT = "built"
    COPIED = "copied"
    FETCHED = "fetched"
    FOUND = "found"  # already there when a run needed it: someone else's, never offered by gc


ACQUIRED = (Action.PULLED, Action.BUILT, Action.COPIED, Action.FETCHED)


class Kind(StrEnum):
    IMAGE = "image"
    MODEL = "model"
    ENGINE = "engine"
    DATASET = "dataset"  # a quality task's dataset snapshot (`labctl fetch --task`)


@dataclass(frozen=True)
class Acquisition:
    kind: Kind
    action: Action
    host: str  # the hosts-file entry (`local` for this machine's Docker)
    docker_host_id: str = ""  # the daemon's own ID: an image id means something on one daemon only
    image_id: str = ""
    references: tuple[str, ...] = ()  # the names labctl gave the image (the tag or digest it pulled, built as)
    folder: str = ""  # a model or dataset snapshot, or an engine key folder
    name: str = ""  # what a person calls it: org/name@commit, an engine key
    run_id: str | None = None
    at: str = field(default_factory=now)
    by: str = field(default_factory=current_user)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["references"] = list(self.references)
        return data

    @classmethod
    def from_json(cls, data: Any) -> Acquisition:
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        text = {k: data.get(k) for k in ("host", "docker_host_id", "image_id", "folder", "name", "at", "by")}
        for key, value in text.items():
            if value is not None and not isinstance(value, str):
                raise ValueError(f"field {key}: not a string")
        references = data.get("references") or []
        if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
            raise ValueError("field references: not a list of strings")
        run_id = data.get("run_id")
        if run_id is not None and not isinstance(run_id, str):
            raise ValueError("field run_id: not a string")
        entry = cls(
            kind=Kind(str(data.get("kind"))),
            action=Action(str(data.get("action"))),
            host=text["host"] or "",
            docker_host_id=text["docker_host_id"] or "",
            image_id=text["image_id"] or "",
            references=tuple(references),
            folder=text["folder"] or "",
            name=text["name"] or "",
            run_id=run_id,
            at=text["at"] or "",
            by=text["by"] or "",
        )
        if entry.kind is Kind.IMAGE and not _IMAGE_ID.match(entry.image_id):
            raise ValueError("field image_id: not an image id (sha256:<64 hex>)")
        if entry.kind is not Kind.IMAGE and not entry.folder:
            raise ValueError("field folder: missing")
        return entry


class Ledger:
    def __init__(self, home: Path) -> None:
        self.path = home / ".state" / "acquired.jsonl"

    def append(self, entry: Acquisition) -> None:
        """One line in one write to a file opened for appending: concurrent writers never mix lines."""
        line = (json.dumps(entry.to_json(), sort_keys=True) + "\n").encode()
        folder = self.path.parent
        if not folder.is_dir():  # .state also holds keys: never open to other users (0770, like the key store)
            folder.mkdir(mode=STATE_DIR_MODE, parents=True, exist_ok=True)
            if folder.stat().st_uid == os.geteuid():
                os.chmod(folder, STATE_DIR_MODE)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, LEDGER_MODE)
        try:
            if os.fstat(fd).st_uid == os.geteuid():
                os.fchmod(fd, LEDGER_MODE)  # the umask narrowed it
            with naming(self.path):
                os.write(fd, line)
        finally:
            os.close(fd)

    def read(self) -> tuple[list[Acquisition], list[str]]:
        """Every readable entry, oldest first, and one line for each that is not (never fatal)."""
        if self.path.is_symlink():  # another home's ledger is not this home's word
            return [], [f"acquisitions ledger {self.path}: a symbolic link, not this home's own file; remove it."]
        if not self.path.exists():
            return [], []
        try:
            data = read_bounded(self.path, f"acquisitions ledger {self.path}", MAX_LEDGER_BYTES)
        except BadInput as exc:
            return [], [str(exc)]
        entries, problems = [], []
        for number, raw in enumerate(data.split(b"\n"), start=1):
            if not raw.strip():
                continue
            try:
                if len(raw) > MAX_LINE_BYTES:
                    raise ValueError(f"longer than {MAX_LINE_BYTES} bytes")
                entries.append(Acquisition.from_json(json.loads(raw)))
            except (ValueError, RecursionError) as exc:
                problems.append(f"acquisitions ledger {self.path} line {number}: not readable ({str(exc)[:200]})")
        return entries, problems
