"""A study's cells: profile x overrides grid x host, each a profile placed and checked as `up` would check it.

Pure: nothing here asks a host anything. A cell's placement is a host of `labctl hosts` or a Slurm cluster
(its partition), where each (cell, repeat) is one job."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any

from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile, check_profile_spec, load_profile, with_overrides
from labctl.errors import BadInput
from labctl.study.spec import Entry, Study


@dataclass(frozen=True)
class Placement:
    kind: str  # "host" (an SSH or local Docker host of `labctl hosts`) or "cluster" (a Slurm cluster)
    name: str
    index: int  # its position in the study's host list (ports of hosts sharing one network stay apart)


@dataclass(frozen=True)
class Cell:
    key: str  # the cell's name: engine.profile[+overrides]@host, a file name in the study's state
    entry: Entry
    overrides: dict[str, Any]
    placement: Placement
    profile: Profile  # the lab's profile with the overrides applied, checked again by the profile rules

    @property
    def label(self) -> str:
        return self.key

    @property
    def host(self) -> str:
        return self.placement.name


def _override_words(overrides: dict[str, Any]) -> str:
    parts = []
    for key, value in sorted(overrides.items()):
        if key == "extra_args":
            words = ",".join(str(w) for w in value)
            if len(words) > 40:
                words = words[:32] + "~" + hashlib.sha256(json.dumps(value).encode()).hexdigest()[:6]
            parts.append(f"args[{words}]")
        else:
            parts.append(f"{key}={value}")
    return ("+" + "+".join(parts)) if parts else ""


def apply_overrides(profile: Profile, overrides: dict[str, Any]) -> Profile:
    """The profile's own file with the overrides written in, then checked as any profile file is (the
    contract still sees every argv word)."""
    src = profile.source
    assert src is not None, "a profile loaded from the lab has its file"
    raw: dict[str, Any] = copy.deepcopy(src.data)
    for key, value in overrides.items():
        if key == "max_batch_size":
            if not isinstance(raw.get("build"), dict):
                raise BadInput(
                    f"override max_batch_size: profile {profile.engine.name}/{profile.name} builds no engine; "
                    "use max_num_seqs."
                )
            raw["build"]["max_batch_size"] = value
        elif key == "extra_args":
            raw["extra_args"] = [*(raw.get("extra_args") or []), *value]
        else:
            raw[key] = value
    spec = check_profile_spec(profile.engine, src, raw)
    return Profile(engine=profile.engine, name=profile.name, spec=spec, source=profile.source)


def grid(entry: Entry) -> list[dict[str, Any]]:
    keys = sorted(entry.overrides)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(entry.overrides[k] for k in keys))]


def expand_cells(
    lab: Lab, study: Study, hosts: list[str], port: int | None = None, clusters: set[str] | None = None
) -> list[Cell]:
    """Every cell in the study's order: entries as listed, their grids, then the hosts. `port` (run --port)
    replaces every entry's port; cells on one host share it, and one that runs beside another moves by a
    multiple of the host count (runner.py)."""
    cells: list[Cell] = []
    for entry in study.entries:
        base = load_profile(lab, entry.engine, entry.profile)
        for overrides in grid(entry):
            profile = apply_overrides(base, overrides)
            for index, host in enumerate(hosts):
                placed = with_overrides(profile, port=(port or entry.port or profile.port) + index)
                key = f"{entry.engine}.{entry.profile}{_override_words(overrides)}@{host}"
                kind = "cluster" if host in (clusters or set()) else "host"
                cells.append(Cell(key, entry, overrides, Placement(kind, host, index), placed))
    seen: set[str] = set()
    for cell in cells:
        if cell.key in seen:
            raise BadInput(f"{study.path}: cell {cell.key} is listed twice: give each profile entry once.")
        seen.add(cell.key)
    return cells


def file_key(cell_key: str, repeat: int) -> str:
    """A file name for (cell, repeat): the key's readable part plus a short hash (keys may hold '=' or '+')."""
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in cell_key)[:80]
    digest = hashlib.sha256(cell_key.encode()).hexdigest()[:8]
    return f"{safe}-{digest}.r{repeat}"


def count_cells(study: Study) -> int:
    """How many (cell, repeat) the file asks for, without the lab."""
    per_entry = sum(math.prod(len(values) for values in entry.overrides.values()) for entry in study.entries)
    return per_entry * max(len(study.hosts), 1) * study.repeats
