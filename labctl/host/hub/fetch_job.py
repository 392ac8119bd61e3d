"""A model fetch on a host reached over ssh://: `python3 -m labctl.host.hub.fetch_job` in a container of
labctl's client image on that host, the host's model cache mounted at /cache. It reads one job on stdin —
the revision's files as the controller asked the Hub (commit, paths, sizes, ETags, URLs), the Hub token,
the disk reserve — compares them with that cache, checks the disk, downloads what is missing (resumably,
labctl/host/hub/cache.py) and writes one JSON object per line: `plan`, `progress`, then `done` or `error`."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from labctl.errors import LabctlError
from labctl.host.hub.cache import FetchPlan, HubFile, download
from labctl.host.remote.lifeline import Lifeline, read_job

PROTOCOL = 1
CACHE = Path("/cache")
MAX_JOB_BYTES = 16 * 1024 * 1024
PROGRESS_EVERY_S = 0.5


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def plan_of(job: dict[str, Any]) -> FetchPlan:
    files = tuple(
        HubFile(str(f["path"]), int(f["size"]), str(f["etag"]), cached=False, url=str(f["url"])) for f in job["files"]
    )
    return FetchPlan(str(job["repo_id"]), str(job["revision"]), str(job["commit"]), str(job["endpoint"]), files)


def run(job: dict[str, Any], lifeline: Lifeline | None = None) -> None:
    if job.get("protocol") != PROTOCOL:
        raise ValueError(f"job protocol {job.get('protocol')!r}; this client speaks {PROTOCOL}")
    hub_dir = CACHE / "hub"
    plan = plan_of(job).against(hub_dir)
    stats = os.statvfs(CACHE)
    free = stats.f_bavail * stats.f_frsize
    emit("plan", missing=plan.missing_bytes, total=plan.total_bytes, cached=plan.cached, free=free)
    if plan.missing_bytes and plan.missing_bytes + int(job["reserve_bytes"]) > free:
        emit("error", kind="disk", need=plan.missing_bytes, free=free, reserve=int(job["reserve_bytes"]))
        sys.exit(2)
    said = [0.0]

    def progress(received: int) -> None:
        now = time.monotonic()
        if now - said[0] >= PROGRESS_EVERY_S:
            said[0] = now
            emit("progress", received=received)

    received = download(plan, hub_dir, progress, job.get("token") or None)
    if lifeline is not None:
        lifeline.done()
    emit("done", received=received, cached=plan.cached)


def main() -> None:
    raw = read_job(MAX_JOB_BYTES)
    if raw is None:
        emit("error", kind="job", message=f"the job is larger than {MAX_JOB_BYTES} bytes")
        sys.exit(2)
    lifeline = Lifeline()
    try:
        run(json.loads(raw), lifeline)
    except LabctlError as exc:
        emit("error", kind="fetch", message=str(exc))
        sys.exit(1)
    except OSError as exc:
        emit("error", kind="fetch", message=f"the cache on this host cannot be written: {exc}")
        sys.exit(1)
    except (KeyError, TypeError, ValueError) as exc:
        emit("error", kind="job", message=f"a malformed job: {type(exc).__name__}: {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
