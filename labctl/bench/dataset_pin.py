"""The lab's workloads' Hub datasets as files to keep: `labctl pin --workload` asks the Hub which commit a
workload's dataset revision names now and writes it into the workload file (comments and order kept, nothing
downloaded); `labctl gc` keeps the snapshots the workloads read."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from labctl.bench.hub_dataset import hub_dataset_of
from labctl.bench.workloads import list_workloads, load_workload
from labctl.catalog.lab import Lab
from labctl.catalog.sourcefile import load_yaml_mapping, parse_yaml_mapping
from labctl.errors import BadInput, LabctlError
from labctl.host.files.atomic import write_atomically
from labctl.host.hub import revisions


@dataclass(frozen=True)
class PinnedDataset:
    old: str
    new: str
    path: Path


_REVISION_LINE = re.compile(r"^(\s*revision:\s*)(['\"]?)[^'\"#\s]+\2")


def pin_workload(lab: Lab, name: str) -> PinnedDataset:
    """Ask the Hub which commit the workload's dataset revision names now and write it into the file (its
    comments and order kept); nothing is downloaded."""
    workload = load_workload(lab, name)
    dataset = hub_dataset_of(name, workload.hub_dataset)
    if dataset is None:
        raise BadInput(
            f"workload {name}: its dataset is not a Hub dataset (no repo, revision and file): nothing to pin."
        )
    path = lab.inside(lab.workloads_dir / f"{name}.yaml")
    src = load_yaml_mapping(path, display=str(path.relative_to(lab.root)))
    line = src.lines.get(("dataset", "revision"))
    assert line is not None  # a Hub dataset has one: the workload was validated
    where = f"dataset.repo and dataset.revision in {src.name}"
    commit = revisions.resolve_commit(dataset.repo, dataset.revision, where, repo_type="dataset")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[line - 1] = _REVISION_LINE.sub(lambda m: m.group(1) + commit, lines[line - 1], count=1)
    text = "".join(lines)
    edited = parse_yaml_mapping(text, path, src.name)
    if (edited.data.get("dataset") or {}).get("revision") != commit:
        raise BadInput(f"{src.where(('dataset', 'revision'))}: labctl cannot rewrite this line; write {commit} there.")
    write_atomically(path, text)
    return PinnedDataset(dataset.revision, commit, path)


def workload_datasets(lab: Lab) -> set[tuple[str, str]] | None:
    """The (repository, commit) pairs the lab's workloads read (a branch as the cache resolves it), whose
    snapshots gc keeps; None when a workload cannot be read, since then nobody can tell what it needs."""
    kept: set[tuple[str, str]] = set()
    for name in list_workloads(lab):
        try:
            hub = hub_dataset_of(name, load_workload(lab, name).hub_dataset)
        except LabctlError:
            return None
        commit = hub.commit() if hub else None
        if hub is not None and commit is not None:
            kept.add((hub.repo, commit))
    return kept
