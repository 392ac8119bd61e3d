"""Run records: runs/<run_id>/record.json (written atomically), the exact compose file, the engine's
saved logs and an events log. A record is what anyone needs to see, and re-run, what ran."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labctl.catalog.lab import Lab
from labctl.catalog.sourcefile import read_bounded
from labctl.catalog.user_folders import data_folder
from labctl.errors import BadInput, LabctlError
from labctl.host.files.atomic import naming, write_atomically
from labctl.host.gpus.lock import file_lock
from labctl.host.identity import current_user
from labctl.run.records.prep_view import own_time_text, prep_rows
from labctl.run.records.record import Record, now
from labctl.run.records.typed import FutureSchema, ShapeError

_RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}")  # always fullmatch: `$` accepts a trailing newline
# Secret-looking values never reach a record, whatever field they hide in.
_SECRET_NAMES = re.compile(r"(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)


ENDED = ("stopped", "failed", "aborted")
# A `labctl down` wrote its intent and is taking the run down (or was interrupted doing so: the next
# `status` or `down` finishes the job). For `up`, a stopping run has ended.
STOPPING = "stopping"
ENDING = (*ENDED, STOPPING)
# A home may be shared by the docker group (a folder with the setgid bit): any member may update a run's
# record (`down --force` of another user's run), so runs are group-writable. Records hold no secrets, and
# nothing here is world-writable.
RUN_FILE_MODE = 0o664
RUN_DIR_MODE = 0o2775
RUNS_DIR_MODE = 0o3775  # sticky: members add their own runs, never remove another's
# What labctl reads back from a home is bounded like any file from someone else (a home may be shared, or
# copied from a colleague): a record or compose file is a few KiB; a bench result keeps every request's
# timings (tens of MiB at most); a saved log is the engine's last 100,000 lines.
MAX_RECORD_BYTES = 1024 * 1024
MAX_RESULT_BYTES = 64 * 1024 * 1024
MAX_LOG_BYTES = 64 * 1024 * 1024


def read_json_file(path: Path, what: str, max_bytes: int = MAX_RECORD_BYTES) -> Any:
    """A JSON file labctl wrote, read back bounded; anything else is one clear line (BadInput)."""
    data = read_bounded(path, f"{what} {path}", max_bytes)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise BadInput(f"{what} {path}: not readable JSON ({reason}).") from None


def shape_refusal(what: str, path: Path, exc: Exception, fix: str) -> BadInput:
    """The one line for a file of the wrong shape: which file, which field, what is wrong, what to do."""
    if isinstance(exc, FutureSchema):
        return BadInput(f"{what} {path}: {exc}.")
    detail = f"field {exc.field}: {exc.problem}" if isinstance(exc, ShapeError) else str(exc)[:200]
    return BadInput(f"{what} {path}: not readable ({detail}). {fix}")


def load_record_file(path: Path) -> Record:
    """A run record file, typed; any other content is one line (BadInput)."""
    return parse_record(
        read_json_file(path, "run record"),
        path,
        "Restore it, or move its run folder out of runs/ (labctl never rewrites it).",
    )


def parse_record(data: Any, where: Path, fix: str) -> Record:
    """A run record from data (a record file's, or the one an export carries), typed, or one line."""
    try:
        return Record.from_json(data)
    except (ValueError, TypeError) as exc:
        raise shape_refusal("run record", where, exc, fix) from None


def read_json_folder(folder: Path, what: str, skipped: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Every *.json result in a folder, oldest first; an unreadable one is reported to `skipped`, never fatal."""
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = read_json_file(path, what, MAX_RESULT_BYTES)
            if not isinstance(data, dict):
                raise BadInput(f"{what} {path}: not a JSON object.")
        except BadInput as exc:
            if skipped:
                skipped(f"skipped {exc}")
            continue
        found.append(data)
    return found


def write_run_file(path: Path, text: str) -> None:
    """A file inside a run's folder (a bench or evaluation result), group-writable like the run itself."""
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.parent.stat().st_uid == os.geteuid():
            os.chmod(path.parent, RUN_DIR_MODE)
    write_atomically(path, text, RUN_FILE_MODE)


def read_tail(path: Path, max_bytes: int) -> str:
    """The last `max_bytes` of a saved log (a log is long by nature: its end is what a person needs)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise BadInput(f"saved log {path}: cannot be read ({exc.strerror}).") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInput(f"saved log {path}: not a regular file.")
        size = os.fstat(fd).st_size
        if size > max_bytes:
            handle.seek(size - max_bytes)
        text = handle.read(max_bytes).decode("utf-8", "replace")
    return f"[labctl: the first {size - max_bytes} bytes of {path} are not shown]\n{text}" if size > max_bytes else text


def read_text_file(path: Path, what: str, max_bytes: int) -> str:
    return read_bounded(path, f"{what} {path}", max_bytes).decode("utf-8", "replace")


class RunEnded(LabctlError):
    def __init__(self, record: Record) -> None:
        who = f" by {record.stopped_by}" if record.stopped_by else ""
        why = f" ({record.stop_reason or record.reason})" if (record.stop_reason or record.reason) else ""
        status = "stopped" if record.status == STOPPING else record.status
        super().__init__(f"run {record.run_id} was {status}{who} while it was starting{why}.")
        self.record = record


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def home_dir(lab: Lab, explicit: str | None = None) -> Path:
    """Where runs/ and labctl's state live: --home / LABCTL_HOME, else the lab folder, else (for the read-only
    lab that ships with labctl) the user's data folder."""
    chosen = explicit or os.environ.get("LABCTL_HOME")
    home = Path(chosen).expanduser().resolve() if chosen else data_folder() if lab.packaged else lab.root
    if home.exists() and not home.is_dir():
        raise BadInput(f"--home {home}: not a folder. Give a folder (it is made if missing), or unset LABCTL_HOME.")
    return home


def is_run_id(text: str) -> bool:
    return _RUN_ID.fullmatch(text) is not None


def is_result_id(text: str, prefix: str) -> bool:
    """A bench (`b…`) or evaluation (`e…`) id: the prefix and a run id, nothing else."""
    return text.startswith(prefix) and is_run_id(text[len(prefix) :])


class Runs:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.root = home / "runs"

    def dir(self, run_id: str) -> Path:
        if not _RUN_ID.fullmatch(run_id):
            raise BadInput(f"{run_id!r} is not a run id (like 20261203-015815-a1b2c3). List them with `labctl runs`.")
        return self.root / run_id

    def make_dir(self, run_id: str) -> Path:
        """The run's folder, created group-writable (see RUN_FILE_MODE)."""
        folder = self.dir(run_id)
        for path, mode in ((self.root, RUNS_DIR_MODE), (folder, RUN_DIR_MODE)):
            path.mkdir(parents=True, exist_ok=True)
            if path.stat().st_uid == os.geteuid() and stat.S_IMODE(path.stat().st_mode) != mode:
                os.chmod(path, mode)
        return folder

    def record_path(self, run_id: str) -> Path:
        return self.dir(run_id) / "record.json"

    def exists(self, run_id: str) -> bool:
        return self.record_path(run_id).is_file()

    def load(self, run_id: str) -> Record:
        path = self.record_path(run_id)
        if not path.is_file():
            raise BadInput(f"no run {run_id} under {self.root}. List them with `labctl runs` (or check LABCTL_HOME).")
        return load_record_file(path)

    def read(self, run_id: str) -> tuple[Record | None, str | None]:
        """The record, or why it cannot be read (the one line); (None, None) when there is none."""
        try:
            return (self.load(run_id), None) if self.exists(run_id) else (None, None)
        except BadInput as exc:
            return None, str(exc)
        except PermissionError:  # another user's home on a shared host: theirs to read, listed from its labels
            return None, None

    def try_load(self, run_id: str) -> Record | None:
        """The record, or None when there is none or it cannot be read (one corrupt record must never
        block status, runs or down for every other run)."""
        try:
            return self.load(run_id) if self.exists(run_id) else None
        except (BadInput, PermissionError):
            return None

    def save(self, record: Record) -> Path:
        path = self.make_dir(record.run_id) / "record.json"
        write_atomically(path, json.dumps(redact(record.to_json()), indent=2, sort_keys=False) + "\n", RUN_FILE_MODE)
        return path

    def update(self, run_id: str, **changes: Any) -> Record:
        """Read, change and write the record under the run's lock: a concurrent `down` or `--replace` is
        never overwritten by a stale copy."""
        with file_lock(self.dir(run_id) / ".lock"):
            record = self.load(run_id).changed(**changes)
            self.save(record)
        return record

    def advance(self, run_id: str, **changes: Any) -> Record:
        """`up`'s own progress (starting → running): refused once someone else ended the run meanwhile."""
        with file_lock(self.dir(run_id) / ".lock"):
            current = self.load(run_id)
            if current.status in ENDING and changes.get("status") in ("starting", "running"):
                raise RunEnded(current)
            record = current.changed(**changes)
            self.save(record)
        return record

    def event(self, run_id: str, kind: str, **fields: Any) -> None:
        """Append one event under the run's lock (the run's watcher appends under it too)."""
        line = json.dumps(redact({"at": now(), "event": kind, "by": current_user(), **fields}))
        path = self.make_dir(run_id) / "events.jsonl"
        with file_lock(self.dir(run_id) / ".lock"), naming(path):
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, RUN_FILE_MODE)
            with os.fdopen(fd, "a", encoding="utf-8") as handle:
                if os.fstat(fd).st_uid == os.geteuid():
                    os.fchmod(fd, RUN_FILE_MODE)  # the umask narrowed it
                handle.write(line + "\n")

    def all_ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.parent.name for p in self.root.glob("*/record.json") if _RUN_ID.fullmatch(p.parent.name))


def redact(value: Any, key: str = "") -> Any:
    """Values under secret-looking keys become '<redacted>'; names (lists of strings) stay."""
    if isinstance(value, dict):
        return {k: redact(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if (
        isinstance(value, str)
        and key
        and _SECRET_NAMES.search(key)
        and not key.endswith(("_names", "_env", "_kind", "_fingerprints"))
    ):
        return "<redacted>" if value else value
    return value


def describe(record: Record) -> list[tuple[str, str]]:
    """`labctl show`: the record's facts a person reads first, in order."""
    rows = [
        (key, str(getattr(record, key)))
        for key in (
            "run_id",
            "status",
            "reason",
            "engine",
            "profile",
            "profile_sha256",
            "environment_label",
            "owner",
            "user",
            "host",
            "host_entry",
            "docker_endpoint",
            "docker_host_id",
            "created_at",
            "ready_at",
            "stopped_at",
            "stopped_by",
            "served_model_name",
        )
        if getattr(record, key) is not None
    ]
    rows += [
        ("image", str(record.image.reference)),
        ("digest", f"{record.image.digest}  (image id {record.image.image_id})"),
        ("base_url", record.base_url),
        ("gpus", ",".join(record.gpus.ids) or "-"),
    ]
    if record.container:
        rows.append(("command", " ".join(record.container.command_line)))
    rows.append(("timings", json.dumps(record.to_json()["timings"])))
    if record.timings.labctl_s:
        rows.append(("labctl's own time", own_time_text(record.timings.labctl_s, record.timings.poll_gap_s)))
    if record.engine_setup and record.engine_setup.model_commit:
        rows.append(("model commit", record.engine_setup.model_commit))
    for name, setting in (record.settings or {}).items():  # what the engine computed with, and whence
        rows.append((f"setting {name}", setting.describe()))
    if record.slurm:
        job = record.slurm
        gpus = ", ".join(f"{i} {u}" for i, u in zip(job.gpu_indexes, job.gpu_uuids, strict=False)) or "-"
        rows += [
            ("slurm job", f"{job.job_id} on cluster {job.cluster}, node {job.node or '-'}"),
            ("slurm gpus", gpus),
            ("slurm state", f"{job.state} exit {job.exit_code or '-'} (from {job.state_source or '-'})"),
        ]
    return rows + prep_rows(record.prep)


def docker_run_lines(runs: Runs, record: Record) -> list[str]:
    """The plain `docker run` commands equivalent to the run's compose file, image pinned by digest."""
    from labctl.compose.canonical import digest_reference
    from labctl.compose.docker_run import docker_run_commands

    pinned = digest_reference(record.resolved_profile or {}, record.image.digest)
    compose_text = read_text_file(runs.dir(record.run_id) / "compose.yaml", "compose file", MAX_RECORD_BYTES)
    return docker_run_commands(compose_text, pinned, f"labctl-{record.run_id}")
