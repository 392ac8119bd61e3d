"""The kinds of backend: every folder beside this module whose package names a `KIND` is one, found by
looking, never by a list here. A new kind (Kubernetes, say) is a new folder and nothing else: its KIND
claims the `--host` names and the records that are its own; Docker hosts take everything else."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import labctl.run.backends as package
from labctl.catalog.lab import Lab
from labctl.run.backends.backend import Backend, BackendKind, StatusSection
from labctl.run.records.record import Record
from labctl.run.records.store import Runs


def kinds() -> list[BackendKind]:
    """Every kind, the fallback (Docker hosts) last: a name no other kind claims is a Docker host's."""
    found: list[BackendKind] = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg:
            kind = getattr(importlib.import_module(f"{package.__name__}.{info.name}"), "KIND", None)
            if kind is not None:
                found.append(kind)
    return sorted(found, key=lambda k: (is_fallback(k), k.name))


def is_fallback(kind: BackendKind) -> bool:
    return bool(getattr(kind, "fallback", False))


def claimed(lab_root: Path, name: str | None) -> Backend | None:
    """The backend a `--host` name means when a kind other than the fallback claims it (a Slurm cluster)."""
    if not name:
        return None
    for kind in kinds():
        if not is_fallback(kind) and (found := kind.find(lab_root, name)) is not None:
            return found
    return None


def claimed_run(lab_root: Path, record: Record) -> Backend | None:
    """The backend a recorded run is on when a kind other than the fallback claims it (a Slurm job)."""
    for kind in kinds():
        if not is_fallback(kind) and (found := kind.of_run(lab_root, record)) is not None:
            return found
    return None


def backend_for(lab_root: Path, name: str) -> Backend:
    """The backend a `--host` name means."""
    for kind in kinds():
        if (found := kind.find(lab_root, name)) is not None:
            return found
    raise AssertionError(f"no kind of backend takes {name!r}")  # the fallback takes every name


def backend_of_run(lab_root: Path, record: Record) -> Backend:
    """The backend a recorded run is on."""
    for kind in kinds():
        if (found := kind.of_run(lab_root, record)) is not None:
            return found
    raise AssertionError(f"no kind of backend takes run {record.run_id}")


def status_sections(lab: Lab, runs: Runs, only: str | None) -> list[StatusSection]:
    """A plain `labctl status`: the fallback's hosts first, then each other kind's part."""
    ordered = sorted(kinds(), key=lambda k: not is_fallback(k))
    return [section for kind in ordered for section in kind.status_all(lab, runs, only)]
