"""lm-evaluation-harness task sets in the lab (suites/lm-eval/NAME/): the harness's own task YAML
(task.yaml) beside labctl's source.yaml, which names the set's version and where its data comes from: files
in the folder, or a Hub dataset at a pinned commit that `labctl fetch --task NAME` puts in the HF cache.

    version: "1"                       # the set's own version, named in profiles and studies
    description: one line
    dataset:
      repo: openai/gsm8k               # absent: the files lie in this folder
      revision: 740312add88f…          # a 40-hex commit
      format: parquet                  # json (JSON lines) or parquet
      files: {test: main/test-00000-of-00001.parquet}
    sandboxed: true                    # its answers are code run in labctl's sandbox (checked before asking)
    reference: answer                  # the document field with a right answer (the harness engine's answer map)

task.yaml is read as data (quality/task_yaml.py: a lab runs no code on the host). Its dataset_path and data
files are set here, to the files above, so nothing is downloaded at evaluation time.

A task the harness ships needs no task.yaml: `labctl fetch --task NAME` writes a source.yaml with
`harness_task: NAME` and `harness_file:` (its YAML in the lm-eval package) instead, the dataset pinned
(quality/shipped.py)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labctl.catalog.fields import Field, check_mapping
from labctl.catalog.hub_names import is_repo_id
from labctl.catalog.lab import Lab
from labctl.catalog.sourcefile import load_yaml_mapping
from labctl.errors import BadInput, LabctlError
from labctl.host.hub.cache import COMMIT
from labctl.quality.shipped import TASK_FILE
from labctl.quality.task_yaml import read_task_config
from labctl.run.models.datasets import snapshot_dir

PREFIX = "lm-eval:"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # the harness's own task names have capitals too
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,31}")
MAX_TASKS = 16  # one evaluation's tasks; more is a study, not an eval
FORMATS = ("json", "parquet")
SPLIT = re.compile(r"[a-z][a-z0-9_]{0,31}")
DATA_PATH = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
MAX_SHARDS = 64


def _data_paths(value: object) -> bool:
    paths = value if isinstance(value, list) else [value]
    return 0 < len(paths) <= MAX_SHARDS and all(
        isinstance(p, str) and DATA_PATH.fullmatch(p) and ".." not in p.split("/") for p in paths
    )


DATASET_FIELDS: dict[str, Field] = {
    "repo": Field("str", "a Hub dataset id (ORG/NAME)", check=is_repo_id),
    "revision": Field("str", "the dataset's 40-hex commit", check=lambda v: COMMIT.fullmatch(v) is not None),
    "format": Field("str", "json (JSON lines) or parquet", required=True, check=lambda v: v in FORMATS),
    "files": Field(
        "map",
        "split -> a relative path in the dataset (or in this folder), or a list of them (shards)",
        required=True,
        check=lambda v: (
            0 < len(v) <= 8 and all(isinstance(k, str) and SPLIT.fullmatch(k) and _data_paths(p) for k, p in v.items())
        ),
    ),
}
SOURCE_FIELDS: dict[str, Field] = {
    "version": Field("str", "the set's version, such as '1'", required=True),
    "description": Field("str", "one line", required=True),
    "dataset": Field("map", required=True, fields=DATASET_FIELDS),
    "sandboxed": Field("bool", "its answers are code, checked in labctl's sandbox", default=False),
    "reference": Field("str", "the document field holding a right answer (for the harness engine's answer map)"),
    "harness_task": Field(
        "str",
        "a task lm-evaluation-harness ships, instead of a task.yaml (written by `labctl fetch --task`)",
        check=lambda v: NAME.fullmatch(v) is not None,
    ),
    "harness_file": Field(
        "str",
        "that task's YAML file inside the lm-eval package (lm_eval/tasks/...)",
        check=lambda v: TASK_FILE.fullmatch(v) is not None,
    ),
}


@dataclass(frozen=True)
class TaskSet:
    name: str
    version: str
    description: str
    folder: Path
    format: str
    files: dict[str, str | list[str]]  # as source.yaml writes them: one path, or a split's shards
    repo: str | None = None
    revision: str | None = None
    sandboxed: bool = False
    reference: str | None = None
    harness_task: str | None = None  # a task the harness ships (and its file), instead of task.yaml
    harness_file: str | None = None

    @property
    def config_name(self) -> str:
        return f"suites/lm-eval/{self.name}/task.yaml"

    def paths(self, split: str) -> list[str]:
        listed = self.files[split]
        return listed if isinstance(listed, list) else [listed]

    @property
    def source(self) -> str:
        return f"{self.repo}@{self.revision}" if self.repo else "files in the lab"


def task_names(suite: str) -> list[tuple[str, str | None]]:
    """`lm-eval:gsm8k@1,coding-basic` -> each task set's name and the version asked for (None: any), checked."""
    given = suite[len(PREFIX) :].split(",")
    if not 0 < len(given) <= MAX_TASKS:
        raise BadInput(f"--suite {suite[:80]!r}: name 1 to {MAX_TASKS} tasks, like lm-eval:gsm8k.")
    found: list[tuple[str, str | None]] = []
    for item in given:
        name, at, version = item.partition("@")
        if not NAME.fullmatch(name) or (at and not VERSION.fullmatch(version)):
            raise BadInput(
                f"--suite: {item[:80]!r} is not a task set name (letters, digits, . _ -), optionally with @VERSION."
            )
        found.append((name, version if at else None))
    if len({name for name, _ in found}) != len(found):
        raise BadInput(f"--suite {suite[:80]!r}: a task is named twice.")
    return found


def load_task(lab: Lab, name: str) -> TaskSet:
    if not NAME.fullmatch(name):
        raise BadInput(f"{name[:80]!r} is not a task set name (letters, digits, . _ -).")
    folder = lab.inside(lab.root / "suites" / "lm-eval" / name)
    path = folder / "source.yaml"
    if not path.is_file():
        known = ", ".join(list_tasks(lab)) or "none"
        raise BadInput(
            f"unknown lm-eval task set {name!r}. Task sets in {lab.root / 'suites' / 'lm-eval'}: {known}. A task "
            f"lm-evaluation-harness ships is pinned into the lab first: `labctl fetch --task {name}`."
        )
    src = load_yaml_mapping(path, display=str(path.relative_to(lab.root)))
    spec = check_mapping(src, (), src.data, SOURCE_FIELDS)
    dataset = spec["dataset"]
    if (dataset["repo"] is None) != (dataset["revision"] is None):
        raise src.problem(("dataset",), "give repo and revision together (or neither, for files in this folder).")
    shipped = spec["harness_task"]
    if shipped is not None:
        if (folder / "task.yaml").exists() or spec["harness_file"] is None or dataset["repo"] is None:
            raise src.problem(
                ("harness_task",),
                "a shipped task names harness_file and a Hub dataset (repo, revision), and has no task.yaml beside it.",
            )
        from labctl.quality.shipped import task_config

        task_config(spec["harness_file"], shipped, resolve=False)  # refused here, not mid-evaluation
    elif not (folder / "task.yaml").is_file():
        raise BadInput(f"task set {name}: suites/lm-eval/{name}/task.yaml is missing (or give harness_task).")
    else:
        read_task_config(folder / "task.yaml", f"suites/lm-eval/{name}/task.yaml")  # refused here, not mid-evaluation
    return TaskSet(
        name=name,
        version=spec["version"],
        description=spec["description"],
        folder=folder,
        format=dataset["format"],
        files=dict(dataset["files"]),
        repo=dataset["repo"],
        revision=dataset["revision"],
        sandboxed=spec["sandboxed"],
        reference=spec["reference"],
        harness_task=shipped,
        harness_file=spec["harness_file"],
    )


def list_tasks(lab: Lab) -> list[str]:
    folder = lab.root / "suites" / "lm-eval"
    return sorted(p.parent.name for p in folder.glob("*/source.yaml")) if folder.is_dir() else []


def data_files(task: TaskSet, cache_dir: str) -> dict[str, list[Path]]:
    """Each split's files on this machine: in the lab folder, or in the fetched snapshot (refused when missing)."""
    root = task.folder if task.repo is None else snapshot_dir(cache_dir, task.repo, str(task.revision))
    found = {split: [root / rel for rel in task.paths(split)] for split in sorted(task.files)}
    missing = [str(p) for paths in found.values() for p in paths if not p.is_file()]
    if missing:
        if task.repo is not None:
            raise BadInput(
                f"task set {task.name}: its dataset {task.source} is not in the cache ({missing[0]}): run "
                f"`labctl fetch --task {task.name}` first."
            )
        raise BadInput(f"task set {task.name}: {missing[0]} is missing.")
    return found


def dataset_sha256(files: dict[str, list[Path]]) -> str:
    """One hash of the data the harness read: each split's name and its bytes' sha256 (a shard each, in order)."""
    outer = hashlib.sha256()
    for split, paths in sorted(files.items()):
        for path in paths:
            outer.update(f"{split}:{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return outer.hexdigest()


def harness_config(task: TaskSet, files: dict[str, list[Path]]) -> dict[str, Any]:
    """The harness's task config (a lab's task.yaml read as data by quality/task_yaml.py, or the harness's own
    shipped task), its data files pointed at `files`."""
    if task.harness_task is not None and task.harness_file is not None:
        from labctl.quality.shipped import task_config

        config = task_config(task.harness_file, task.harness_task)
    else:
        config = read_task_config(task.folder / "task.yaml", task.config_name)
    config["dataset_path"] = task.format
    config.pop("dataset_name", None)
    config["dataset_kwargs"] = {
        "data_files": {
            split: [str(p) for p in paths] if len(paths) > 1 else str(paths[0]) for split, paths in files.items()
        }
    }
    return config


def pinned_datasets(lab: Lab) -> set[tuple[str, str]] | None:
    """The (repository, commit) pairs the lab's task sets pin, whose snapshots gc keeps; None when a task set
    cannot be read, since then nobody can tell what it would need."""
    pinned: set[tuple[str, str]] = set()
    for name in list_tasks(lab):
        try:
            task = load_task(lab, name)
        except LabctlError:
            return None
        if task.repo and task.revision:
            pinned.add((task.repo, task.revision))
    return pinned
