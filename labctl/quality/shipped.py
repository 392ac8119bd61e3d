"""Tasks lm-evaluation-harness ships, as a lab's task sets. `labctl fetch --task NAME` finds the harness's own
task (its YAML, in the installed lm-eval package: code labctl depends on and pins, trusted as labctl's own), asks
the Hub which commit the dataset it reads is at now, picks the files of the splits it uses, downloads them and
writes suites/lm-eval/NAME/source.yaml naming the task and that commit. From then on the set is pinned like any
other: an evaluation reads those files offline and its record names the commit.

A group (mmlu_pro) or tag (ai2_arc) is pinned task by task, and `fetch` says the suite that names them all."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from labctl.errors import BadInput

SPLIT_KEYS = ("test_split", "validation_split", "training_split", "fewshot_split")
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
TASK_FILE = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*\.yaml")
DATA_SUFFIXES = {".parquet": "parquet", ".json": "json", ".jsonl": "json"}
MAX_FILES_PER_SPLIT = 64
MAX_FRONT_MATTER = 256 * 1024


@dataclass(frozen=True)
class Found:
    """What a name means to the harness: one task (its YAML file) or the tasks a group or tag gathers."""

    name: str
    file: str | None  # a task's YAML, relative to lm_eval/tasks
    members: tuple[str, ...] = ()  # a group's or tag's tasks


def tasks_dir() -> Path:
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).resolve().parent


@cache
def _index() -> Any:
    from lm_eval.tasks import TaskManager

    return TaskManager()  # indexes the harness's ~13,000 task files: seconds, so only when a name is looked up


def find(name: str) -> Found:
    """The harness's task, group or tag called `name` (refused with the closest names when there is none)."""
    from lm_eval.tasks._index import Kind

    if not TASK_NAME.fullmatch(name):
        raise BadInput(f"{name[:80]!r} is not an lm-eval task name (letters, digits, . _ -).")
    manager = _index()
    entry = manager.task_index.get(name)
    if entry is None:
        close = difflib.get_close_matches(name, manager.all_tasks, n=4)
        hint = f" Closest: {', '.join(close)}." if close else ""
        raise BadInput(f"lm-evaluation-harness {harness_version()} ships no task, group or tag {name!r}.{hint}")
    if entry.kind in (Kind.TASK, Kind.PY_TASK):
        if entry.yaml_path is None or entry.kind is Kind.PY_TASK:
            raise BadInput(f"lm-eval's {name} is a Python task class: labctl runs the harness's YAML tasks only.")
        return Found(name, Path(entry.yaml_path).resolve().relative_to(tasks_dir()).as_posix())
    members = _members(manager, name)
    if not members:
        raise BadInput(f"lm-eval's {name} is a group or tag of no tasks labctl can run.")
    return Found(name, None, tuple(members))


def _members(manager: Any, name: str, depth: int = 0) -> list[str]:
    """A group's or tag's leaf tasks, subgroups opened (four deep at most)."""
    from lm_eval.tasks._index import Kind
    from lm_eval.tasks._yaml_loader import load_yaml

    entry = manager.task_index[name]
    if entry.kind is Kind.TAG:
        listed = sorted(t for t, e in manager.task_index.items() if name in e.tags and e.kind is Kind.TASK)
    else:
        config = load_yaml(entry.yaml_path, resolve_func=False) if entry.yaml_path else entry.cfg or {}
        tasks = config.get("task") or []
        listed = [t if isinstance(t, str) else str(t.get("task", "")) for t in tasks]
    found: list[str] = []
    for member in listed:
        sub = manager.task_index.get(member)
        if sub is None or depth > 4:
            continue
        found += [member] if sub.kind is Kind.TASK else _members(manager, member, depth + 1)
    return list(dict.fromkeys(found))


def harness_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


def task_config(file: str, name: str, resolve: bool = True) -> dict[str, Any]:
    """The harness's task config from its own YAML (`!function`s bound to the package's own code when `resolve`);
    `file` comes from a lab's source.yaml, so it must name a file inside lm_eval/tasks that defines `name`."""
    from lm_eval.tasks._yaml_loader import load_yaml

    root = tasks_dir()
    path = (root / file).resolve()
    if not TASK_FILE.fullmatch(file) or not path.is_relative_to(root) or not path.is_file():
        raise BadInput(
            f"harness_file {file[:80]!r} is not a task file lm-evaluation-harness {harness_version()} ships: pin "
            f"the task again with `labctl fetch --task {name}` after removing its source.yaml."
        )
    config: dict[str, Any] = load_yaml(path, resolve_func=resolve)
    if config.get("task") != name:
        raise BadInput(
            f"{file} of lm-evaluation-harness {harness_version()} defines {config.get('task')!r}, not {name}: the "
            "harness changed since the task was pinned; pin it again."
        )
    for key in ("tag", "group", "task_list"):
        config.pop(key, None)
    if config.get("unsafe_code"):
        raise BadInput(
            f"lm-eval's {name} runs the model's code on this host, outside any sandbox (unsafe_code in {file}): "
            "labctl refuses it. labctl's own coding suites run code in its sandbox (labctl suites)."
        )
    return config


def splits_of(config: dict[str, Any]) -> list[str]:
    return sorted({str(config[k]) for k in SPLIT_KEYS if config.get(k)})


def choose_files(
    repo: str, paths: list[str], front_matter: dict[str, Any] | None, config_name: str | None, splits: list[str]
) -> tuple[str, dict[str, list[str]]]:
    """The dataset's files for each split the task reads, as the Hub lays them out (the README's `configs`, or
    the Hub's naming conventions), and their one format."""
    patterns = _configured(front_matter, config_name) if front_matter else None
    chosen: dict[str, list[str]] = {}
    for split in splits:
        tried = patterns.get(split, []) if patterns is not None else _conventional(config_name, split)
        # a card's patterns together name a split's files; of the Hub's conventions, the first that matches
        groups = [tried] if patterns is not None else [[p] for p in tried]
        for group in groups:
            matched = sorted(
                {p for p in paths for g in group if _glob(g).fullmatch(p) and Path(p).suffix in DATA_SUFFIXES}
            )
            if matched:
                chosen[split] = matched
                break
        else:
            looked = ", ".join(tried[:4]) or "no data_files in its README's configs"
            raise BadInput(
                f"dataset {repo}{'/' + config_name if config_name else ''} has no parquet or JSON files for split "
                f"{split!r} (looked for {looked}): labctl reads parquet and JSON lines only."
            )
        if len(chosen[split]) > MAX_FILES_PER_SPLIT:
            raise BadInput(
                f"dataset {repo}: split {split} has {len(chosen[split])} files; at most {MAX_FILES_PER_SPLIT}."
            )
    formats = {DATA_SUFFIXES[Path(p).suffix] for files in chosen.values() for p in files}
    if len(formats) != 1:
        raise BadInput(f"dataset {repo}: its splits mix formats ({', '.join(sorted(formats))}); labctl reads one.")
    return formats.pop(), chosen


def _configured(front_matter: dict[str, Any], config_name: str | None) -> dict[str, list[str]] | None:
    """split -> patterns from the README's `configs:` entry for this config (None: the README names none)."""
    configs = front_matter.get("configs")
    if not isinstance(configs, list) or not configs:
        return None
    entries = [c for c in configs if isinstance(c, dict)]
    wanted = config_name or "default"
    entry = next((c for c in entries if c.get("config_name") == wanted), None)
    if entry is None and config_name is None:
        entry = next((c for c in entries if c.get("default")), entries[0] if len(entries) == 1 else None)
    if entry is None:
        return None
    files = entry.get("data_files")
    if isinstance(files, str | list) and all(
        isinstance(f, str) for f in (files if isinstance(files, list) else [files])
    ):
        return {"train": [files] if isinstance(files, str) else list(files)}
    found: dict[str, list[str]] = {}
    for item in files if isinstance(files, list) else []:
        if isinstance(item, dict) and isinstance(item.get("split"), str):
            path = item.get("path")
            found[item["split"]] = [path] if isinstance(path, str) else [p for p in path or [] if isinstance(p, str)]
    return found


def _conventional(config_name: str | None, split: str) -> list[str]:
    """The Hub's default layout, config folder first."""
    folders = ([f"{config_name}/"] if config_name else []) + ["data/", ""]
    return [f"{d}{pattern}" for d in folders for pattern in (f"{split}-*", f"{split}.*", f"{split}/*")]


def _glob(pattern: str) -> re.Pattern[str]:
    """The Hub's data_files globs: `*` within one folder, `**` across folders."""
    out = ""
    for part in re.split(r"(\*\*/?|\*|\?)", pattern):
        out += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
    return re.compile(out)


def front_matter(readme: bytes) -> dict[str, Any] | None:
    """The YAML header of a dataset card (None: none, or not a mapping)."""
    text = readme[:MAX_FRONT_MATTER].decode("utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    end = text.find("\n---", 3)
    if end < 0:
        return None
    try:
        data = yaml.safe_load(text[3:end])
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def source_yaml(
    name: str, file: str, config: dict[str, Any], repo: str, commit: str, fmt: str, files: dict[str, list[str]]
) -> str:
    """suites/lm-eval/NAME/source.yaml for a shipped task, its values already checked."""
    version = str((config.get("metadata") or {}).get("version", "1"))
    spec = {
        "version": version if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,31}", version) else "1",
        "description": f"{name} as lm-evaluation-harness {harness_version()} ships it ({file})",
        "harness_task": name,
        "harness_file": file,
        "dataset": {
            "repo": repo,
            "revision": commit,
            "format": fmt,
            "files": {split: paths[0] if len(paths) == 1 else paths for split, paths in sorted(files.items())},
        },
    }
    head = (
        f"# Pinned by `labctl fetch --task {name}`: the harness's own task, its dataset at one commit.\n"
        "# Remove this file and fetch again to pin the dataset's newest commit.\n"
    )
    return head + yaml.safe_dump(spec, sort_keys=False)
