"""A third kind of backend that lives only in the tests: a run is the harness engine as a plain local process
(no Docker, no scheduler), on `--host process-NAME`. It proves the seam: this folder, found beside docker/ and
slurm/ in labctl/run/backends/, is everything a new placement needs. Its own facts (the process id) stay
under its own key of the record, which keeps keys it does not know."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from labctl.catalog.hosts_file import HostEntry
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.errors import BadInput, LabctlError
from labctl.host.identity import current_user
from labctl.run.backends.backend import Backend, BackendKind, Leftover, Say, StatusSection, StopRequest
from labctl.run.lifecycle.down import Stopped
from labctl.run.lifecycle.reproduce import ReproduceRequest
from labctl.run.lifecycle.status import LogView
from labctl.run.lifecycle.up_plan import UpRequest
from labctl.run.records.record import Endpoint, Record, new_record, now
from labctl.run.records.store import Runs, new_run_id

PREFIX = "process-"
KEY = "local_process"  # this kind's part of the record


@dataclass(frozen=True)
class LocalProcess:
    name: str

    @property
    def queues(self) -> bool:
        return False

    def parse_gpus(self, text: str | None) -> list[str] | None:
        if text is not None:
            raise BadInput(f"--gpus {text!r}: a local process holds no GPU.")
        return None

    def start(self, lab: Lab, runs: Runs, request: UpRequest, say: Say, progress: Say | None = None) -> Record:
        profile = load_profile(lab, request.engine, request.profile)
        if profile.engine.name != "harness":
            raise BadInput(f"{self.name} runs only the harness engine as a process, not {profile.engine.name}.")
        port = request.port or profile.port
        run_id = new_run_id()
        runs.make_dir(run_id)
        with (runs.dir(run_id) / "serve.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "labctl.harness", "--model", profile.served_model_name, "--port", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # it outlives `labctl up`, as a container does
            )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + request.timeout
        while not answers(base):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise LabctlError(f"the harness process on port {port} did not answer")
            time.sleep(0.05)
        record = new_record(
            run_id,
            profile.engine.name,
            profile.name,
            profile.served_model_name,
            Endpoint(base_url=base + "/v1", host="127.0.0.1", port=port),
            request.owner,
            "harness-check",
            status="running",
            record_path=str(runs.record_path(run_id)),
            host_entry=self.name,
            docker_endpoint="",
            ready_at=now(),
            extra={KEY: {"pid": process.pid}},
        )
        runs.save(record)
        return record

    def ready_lines(self, record: Record) -> list[str]:
        return [
            f"ready: {record.engine}/{record.profile} run {record.run_id} as process {pid_of(record)} on {self.name}",
            f"  OpenAI base URL  {record.base_url}",
            f"  stop it with     labctl down {record.run_id}",
        ]

    def summary(self, record: Record) -> dict[str, Any]:
        return {**record.summary(), KEY: record.extra[KEY]}

    def reproduce(
        self, lab: Lab, runs: Runs, request: ReproduceRequest, say: Say, progress: Say | None = None
    ) -> Record:
        raise BadInput(f"{self.name} does not reproduce runs.")

    def stop(self, runs: Runs, request: StopRequest) -> list[Stopped]:
        if request.target is None:
            raise BadInput(f"on {self.name}, name the run: labctl down RUN_ID.")
        record = runs.load(request.target)
        with suppress(ProcessLookupError):
            os.killpg(pid_of(record), signal.SIGTERM)
        runs.update(record.run_id, status="stopped", stopped_at=now(), stopped_by=current_user())
        return [Stopped(record.run_id, record.engine, record.profile, detail=f": process {pid_of(record)} ended")]

    def status(self, runs: Runs) -> list[StatusSection]:
        mine = [r for r in (runs.try_load(i) for i in runs.all_ids()) if r is not None and r.host_entry == self.name]
        live = [r for r in mine if r.status == "running"]
        return [
            StatusSection(
                title=f"processes on {self.name}",
                header=("RUN", "ENGINE/PROFILE", "PID", "BASE URL", "HEALTH"),
                rows=tuple((r.run_id, f"{r.engine}/{r.profile}", str(pid_of(r)), r.base_url, health(r)) for r in live),
                json_rows=tuple(self.summary(r) for r in live),
                empty=f"no run of this home on {self.name}",
            )
        ]

    def logs(self, runs: Runs, run_id: str, view: LogView, service: str) -> Iterator[str]:
        yield (runs.dir(run_id) / "serve.log").read_text(encoding="utf-8", errors="replace")

    def run_host(self, record: Record) -> HostEntry | None:
        return None

    def on_run_host(self, record: Record) -> AbstractContextManager[None]:
        return nullcontext()

    def placed_facts(self, record: Record) -> dict[str, Any]:
        return {KEY: record.extra[KEY]}

    def leftovers(self, remove: bool) -> list[Leftover]:
        return []


class LocalProcessKind:
    name = "local_process"

    def find(self, lab_root: Path, name: str) -> Backend | None:
        return LocalProcess(name) if name.startswith(PREFIX) else None

    def of_run(self, lab_root: Path, record: Record) -> Backend | None:
        return LocalProcess(record.host_entry) if KEY in record.extra else None

    def status_all(self, lab: Lab, runs: Runs, only: str | None) -> list[StatusSection]:
        names = sorted({r.host_entry for r in (runs.try_load(i) for i in runs.all_ids()) if r and KEY in r.extra})
        return [section for name in names for section in LocalProcess(name).status(runs)]


def pid_of(record: Record) -> int:
    return int(record.extra[KEY]["pid"])


def answers(base: str) -> bool:
    try:
        return httpx.get(base + "/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def health(record: Record) -> str:
    return "healthy" if answers(record.base_url.removesuffix("/v1")) else "unreachable"


KIND: BackendKind = LocalProcessKind()
