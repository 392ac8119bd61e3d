"""The one interface that places a run: start, stop, state, address and logs, whatever runs it (Docker on
this machine or an SSH host, a Slurm cluster's job, later a Kubernetes pod). Commands ask a `Backend` and
never which kind it is; a kind of backend is a folder beside this module (see kinds)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from labctl.catalog.hosts_file import HostEntry
from labctl.catalog.lab import Lab
from labctl.run.lifecycle.down import Stopped
from labctl.run.lifecycle.reproduce import ReproduceRequest
from labctl.run.lifecycle.status import LogView
from labctl.run.lifecycle.up_plan import UpRequest
from labctl.run.records.record import Record
from labctl.run.records.store import Runs

Say = Callable[[str], None]
Confirm = Callable[[list[dict[str, object]]], bool]


@dataclass(frozen=True)
class StopRequest:
    """What one `labctl down` asks for: a run id or an engine name (None: your only run), and why."""

    target: str | None
    reason: str | None = None
    force: bool = False
    all_runs: bool = False
    confirm: Confirm | None = None
    by: str | None = None  # who stops it, when not the user at the terminal (a study)


@dataclass(frozen=True)
class StatusSection:
    """One part of `labctl status`: a host's or a cluster's runs, as a table and as JSON rows."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...] = ()
    json_rows: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()  # said before the tables
    skips: tuple[str, ...] = ()  # runs shown incompletely: the command exits 1
    problem: str = ""  # could not be asked: printed in place of the table
    # The host or cluster did not answer: its name and why (`status --json` says so beside the runs it lists).
    unreachable: tuple[str, str] | None = None
    empty: str = ""  # printed when there is no run


@dataclass(frozen=True)
class Leftover:
    """An engine container whose run has ended, found by `labctl gc` on a backend's machines."""

    where: str  # the node (or host) it is on
    container: str
    owner: str  # what it belonged to (a Slurm job id), "" when unknown
    removed: bool = False
    kept: str = ""  # not proven ended (the scheduler did not answer): kept, and why


class Backend(Protocol):
    """Where one run is placed: a Docker host, or a cluster whose scheduler chooses the machine."""

    @property
    def name(self) -> str:
        """The hosts-file entry: what `--host` names."""

    @property
    def queues(self) -> bool:
        """A scheduler queues each run before it starts (the wait is recorded apart, never cold start), so
        labctl neither waits for GPUs itself nor retries a start there."""

    def parse_gpus(self, text: str | None) -> list[str] | None:
        """What `--gpus` means here (GPU ids on a host, a count on a cluster), checked when the run starts."""

    def start(self, lab: Lab, runs: Runs, request: UpRequest, say: Say, progress: Say | None = None) -> Record:
        """Start one engine and wait until it answers; the record says where it runs."""

    def ready_lines(self, record: Record) -> list[str]:
        """What `up` says once the run answers (its address first)."""

    def summary(self, record: Record) -> dict[str, Any]:
        """The run's machine-readable face (`up --json`)."""

    def reproduce(
        self, lab: Lab, runs: Runs, request: ReproduceRequest, say: Say, progress: Say | None = None
    ) -> Record:
        """A recorded setup started again here."""

    def stop(self, runs: Runs, request: StopRequest) -> list[Stopped]:
        """Stop runs and wait until nothing of them is left running."""

    def status(self, runs: Runs) -> list[StatusSection]:
        """This backend's runs now (`status --host NAME`)."""

    def logs(self, runs: Runs, run_id: str, view: LogView, service: str) -> Iterator[str]:
        """A run's engine logs, live while it runs, else the copy saved with its record."""

    def run_host(self, record: Record) -> HostEntry | None:
        """The Docker host the run is on (its bench client and GPU samples go there), None when unknown."""

    def on_run_host(self, record: Record) -> AbstractContextManager[None]:
        """Docker calls about the run (its bench client, its engine's state) go to the daemon it runs on."""

    def placed_facts(self, record: Record) -> dict[str, Any]:
        """Where the run landed, as a study cell keeps it (GPU ids, or a node and the GPUs it holds)."""

    def leftovers(self, remove: bool) -> list[Leftover]:
        """Engine containers whose run has ended (`gc`); with `remove`, removed."""


class BackendKind(Protocol):
    """One kind of backend (a folder beside this module): which `--host` names and records are its own."""

    @property
    def name(self) -> str: ...

    def find(self, lab_root: Path, name: str) -> Backend | None:
        """The backend a hosts-file name means, when it is one of this kind's."""

    def of_run(self, lab_root: Path, record: Record) -> Backend | None:
        """The backend a recorded run is on, when it is one of this kind's."""

    def status_all(self, lab: Lab, runs: Runs, only: str | None) -> list[StatusSection]:
        """This kind's part of a plain `labctl status`: every backend of the kind (`only`: the global --host)."""
