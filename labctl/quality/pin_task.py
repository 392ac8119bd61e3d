"""`labctl fetch --task NAME` for a task lm-evaluation-harness ships and the lab has not pinned yet: the Hub
dataset it reads resolved to a commit now, the files of its splits downloaded, suites/lm-eval/NAME/source.yaml
written (quality/shipped.py says what is chosen; this module asks the Hub and writes)."""

from __future__ import annotations

from dataclasses import dataclass

from labctl.catalog.hub_names import is_repo_id
from labctl.catalog.lab import Lab
from labctl.errors import BadInput
from labctl.host.files.atomic import write_atomically
from labctl.host.hub import revisions as hub
from labctl.quality import shipped
from labctl.run.models.datasets import fetch_dataset, snapshot_dir
from labctl.run.models.fetch import Fetched, Say

README = "README.md"


@dataclass(frozen=True)
class PinnedTask:
    name: str
    repo: str
    commit: str
    files: int
    fetched: Fetched


def pin_shipped(lab: Lab, name: str, cache_dir: str, say: Say, live: Say | None) -> list[PinnedTask]:
    """Pin the harness's task `name` (or each task of its group or tag) into `lab` and fetch its data."""
    lab.check_writable(f"pinning lm-eval's {name}")
    found = shipped.find(name)
    names = list(found.members) if found.members else [name]
    if len(names) > 64:
        raise BadInput(f"lm-eval's {name} gathers {len(names)} tasks; pin at most 64 at once (name a subgroup).")
    pinned = []
    for task in names:
        folder = lab.inside(lab.root / "suites" / "lm-eval" / task)
        if (folder / "source.yaml").exists():
            say(f"task set {task}: already pinned in suites/lm-eval/{task}/source.yaml (kept)")
            continue
        file = found.file if not found.members else shipped.find(task).file
        assert file is not None
        pinned.append(_pin_one(lab, task, file, cache_dir, say, live))
    return pinned


def _pin_one(lab: Lab, name: str, file: str, cache_dir: str, say: Say, live: Say | None) -> PinnedTask:
    config = shipped.task_config(file, name, resolve=False)
    repo = config.get("dataset_path")
    kwargs = config.get("dataset_kwargs") or {}
    where = f"dataset_path of lm-eval's {name} ({file})"
    if not isinstance(repo, str) or not is_repo_id(repo) or (isinstance(kwargs, dict) and kwargs.get("data_files")):
        raise BadInput(
            f"lm-eval's {name} reads {str(repo)[:80]!r}{' with its own data_files' if kwargs else ''}, not a Hub "
            "dataset labctl can pin; write a task set of your own (suites/lm-eval/NAME/) for it."
        )
    revision = str(kwargs.get("revision") or "main") if isinstance(kwargs, dict) else "main"
    commit = hub.resolve_commit(repo, revision, where, repo_type="dataset")
    paths = hub.list_files(repo, commit, where, repo_type="dataset")
    card = None
    if README in paths:
        fetched = fetch_dataset(repo, commit, cache_dir, where, say=say, live=live, files=(README,))
        card = shipped.front_matter((snapshot_dir(fetched.cache_dir, repo, commit) / README).read_bytes())
    config_name = config.get("dataset_name")
    fmt, files = shipped.choose_files(
        repo, paths, card, str(config_name) if config_name else None, shipped.splits_of(config)
    )
    wanted = tuple(sorted({p for listed in files.values() for p in listed} | ({README} if card is not None else set())))
    fetched = fetch_dataset(repo, commit, cache_dir, where, say=say, live=live, files=wanted)
    text = shipped.source_yaml(name, file, config, repo, commit, fmt, files)
    target = lab.root / "suites" / "lm-eval" / name / "source.yaml"
    write_atomically(target, text)
    from labctl.quality.tasks import load_task

    try:
        load_task(lab, name)  # what was written reads back as a task set, or is not left behind
    except BadInput:
        target.unlink()
        target.parent.rmdir()
        raise
    return PinnedTask(name, repo, commit, sum(len(v) for v in files.values()), fetched)
