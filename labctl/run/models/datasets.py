"""labctl fetch --task: a quality task's dataset at its pinned revision, downloaded into the same Hugging Face
cache as models (datasets--ORG--NAME), with the same disk check, progress and resume. The evaluation then reads
the snapshot's files offline: `datasets`' own offline mode reads only the `datasets` cache, never a Hub
snapshot, so a task's data files are pointed at the snapshot's paths instead."""

from __future__ import annotations

import time
from pathlib import Path

from labctl.catalog.hosts_file import LOCAL
from labctl.compose.options import check_cache_dir
from labctl.errors import BadInput
from labctl.host.hub import revisions as hub
from labctl.host.hub.cache import COMMIT, repo_folder
from labctl.run.models.fetch import Fetched, Meter, Say, check_disk_space, starting_line
from labctl.run.records.acquired import Acquisition, Action, Kind
from labctl.run.records.prep_view import size as human


def snapshot_dir(cache_dir: str, repo_id: str, commit: str) -> Path:
    return repo_folder(Path(cache_dir) / "hub", repo_id, "dataset") / "snapshots" / commit


def dataset_acquisition(fetched: Fetched) -> Acquisition:
    """The ledger line of a dataset fetch (datasets are fetched to this machine only)."""
    return Acquisition(
        Kind.DATASET,
        Action.FOUND if fetched.cached else Action.FETCHED,
        host=LOCAL,
        folder=str(snapshot_dir(fetched.cache_dir, fetched.repo_id, fetched.commit)),
        name=f"{fetched.repo_id}@{fetched.commit}",
    )


def fetch_dataset(
    repo_id: str,
    revision: str,
    cache_dir: str | None,
    where: str,
    say: Say,
    live: Say | None,
    files: tuple[str, ...] | None = None,
) -> Fetched:
    """A dataset revision into this machine's cache; nothing when it is there. A task's revision must be a
    commit (it pins its data); a workload names its one file (`files`) and may name a branch until pinned."""
    if files is None and not COMMIT.fullmatch(revision):
        raise BadInput(f"{repo_id}@{revision}: a task's dataset revision must be a 40-hex commit; check {where}.")
    cache = check_cache_dir(cache_dir)
    hub_dir = Path(cache) / "hub"
    start = time.monotonic()
    plan = hub.plan_fetch(repo_id, revision, hub_dir, where, repo_type="dataset", only=files)
    if plan.cached:
        hub.download(plan, hub_dir, lambda _n: None)
        received, cached = 0, True
        say(f"dataset {repo_id}@{revision}: cached in {cache}, nothing to download")
    else:
        check_disk_space(plan.missing_bytes, hub_dir, f"fetching dataset {repo_id}@{revision}")
        resume = sum(f.partial for f in plan.files if not f.cached)
        say(starting_line(plan, "", cache, plan.missing_bytes, resume))
        received, cached = hub.download(plan, hub_dir, Meter(plan.missing_bytes, say, live)), False
        if live is not None:
            live("")
        say(f"fetched {human(received)} in {time.monotonic() - start:.1f} s")
    return Fetched(
        repo_id=repo_id,
        revision=revision,
        commit=plan.commit,
        cache_dir=cache,
        files=len(plan.files),
        total_bytes=plan.total_bytes,
        received_bytes=received,
        seconds=round(time.monotonic() - start, 3),
        cached=cached,
        endpoint=plan.endpoint,
    )
