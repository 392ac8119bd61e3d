"""labctl gc: what this home's runs left on the host that nothing needs any more — images, model snapshots
(the Hugging Face cache layout, `models--org--name/snapshots/<commit>`) and TensorRT-LLM engine folders.

Only what a record in this home used is ever a candidate (never another user's image or cache). A candidate
is kept when a run that has not ended uses it, when any container on the host uses it (whichever home
started it), or when a profile of this lab names it (the next `up` would need it again).

gc acts on one host (--host): only records of runs on that host are read. On a host reached over ssh://,
model snapshots and engine folders live on that machine's disks, out of this controller's reach: only its
images are collected there."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from labctl.catalog.engines import list_engine_names
from labctl.catalog.image import ImageRef
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile, list_profile_names, load_profile
from labctl.compose.labels import RunLabels
from labctl.compose.render import build_key
from labctl.errors import LabctlError
from labctl.host import docker as dk
from labctl.host.engine_api import unique_image_bytes
from labctl.host.files import remove_tree, tree_bytes
from labctl.host.hosts import LOCAL, LOCAL_HOST, HostEntry
from labctl.run.records.record import Record
from labctl.run.records.store import ENDED, Runs, is_run_id

_COMMIT = re.compile(r"[0-9a-f]{40}\Z")
_KEY = re.compile(r"[0-9a-f]{16}\Z")
_MODEL_ID = re.compile(r"(?!.*\.\.)(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}\Z")
_REF_NAME = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._/-]{0,199}\Z")


@dataclass(frozen=True)
class Item:
    kind: str  # image | model | engine
    name: str  # an image reference, org/name@revision, or an engine key
    where: str  # the image id, or the folder
    bytes: int
    last_run: str  # the newest run of this home that used it


@dataclass(frozen=True)
class Outcome:
    item: Item
    removed: bool
    problem: str = ""


@dataclass(frozen=True)
class Uses:
    """What a run uses on the host."""

    image_id: str
    snapshot: Path | None
    engine_dir: Path | None


def uses_of(record: Record, local_files: bool = True) -> Uses:
    if not local_files:
        return Uses(record.image.image_id, None, None)
    options = record.compose.render_options if record.compose else {}
    model = (record.resolved_profile or {}).get("model") or {}
    snapshot = None
    # The commit the run fetched, when recorded: its branch may name another commit since.
    fetched = record.engine_setup.model_commit if record.engine_setup else None
    revision = fetched or model.get("revision")
    if options.get("cache_dir") and model.get("id") and revision:
        snapshot = find_snapshot(Path(str(options["cache_dir"])), str(model["id"]), str(revision))
    build = record.timings.engine_build_s
    store = options.get("engine_store")
    engine_dir = engine_key_dir(Path(build.engine_dir), Path(store)) if build and build.engine_dir and store else None
    return Uses(record.image.image_id, snapshot, engine_dir)


def model_dirs(cache_dir: Path, model_id: str) -> list[Path]:
    name = "models--" + model_id.replace("/", "--")
    return [d for d in (cache_dir / "hub" / name, cache_dir / name) if d.is_dir()]


def find_snapshot(cache_dir: Path, model_id: str, revision: str) -> Path | None:
    """The snapshot folder of a revision (a commit hash, or a branch/tag the cache's refs/ resolves). Names
    come from records and profiles: anything that could step outside the cache finds nothing."""
    if not _MODEL_ID.match(model_id) or not (_COMMIT.match(revision) or _REF_NAME.match(revision)):
        return None
    for folder in model_dirs(cache_dir, model_id):
        commit = revision
        if not _COMMIT.match(revision):
            ref = folder / "refs" / revision
            commit = ref.read_text(encoding="utf-8").strip()[:40] if ref.is_file() else ""
        snapshot = folder / "snapshots" / commit
        if _COMMIT.match(commit) and snapshot.is_dir() and not snapshot.is_symlink():
            return snapshot
    return None


def engine_key_dir(engine_dir: Path, store: Path) -> Path | None:
    """A built engine lives in STORE/<key>/<served name>; the key folder is what one build made. A recorded
    folder anywhere else is not labctl's to remove."""
    key = engine_dir.parent
    if _KEY.match(key.name) and key.parent == store and not key.is_symlink():
        return key
    return None


def lab_profiles(lab: Lab) -> list[Profile]:
    found = []
    for engine in list_engine_names(lab):
        for name in list_profile_names(lab, engine):
            try:
                found.append(load_profile(lab, engine, name, allow_unsupported=True))
            except LabctlError:
                continue  # an invalid profile cannot start anything
    return found


def live_uses(runs: Runs, local_files: bool) -> tuple[set[str], list[Uses]]:
    """Images any container uses, and what the runs behind labctl's containers use (found through the
    home their labels name, so a run from another home is protected too)."""
    images, uses = set(), []
    for image_id, labels in dk.containers_and_images():
        images.add(image_id)
        run = RunLabels.from_labels(labels) if dk.RUN_LABEL in labels else None
        if run is None or not is_run_id(run.run_id):
            continue
        record = Runs(Path(run.home)).try_load(run.run_id) if run.home else runs.try_load(run.run_id)
        if record is not None:
            uses.append(uses_of(record, local_files))
    return images, uses


def find_garbage(
    lab: Lab, runs: Runs, host: HostEntry = LOCAL_HOST, skipped: Callable[[str], None] | None = None
) -> list[Item]:
    """What this home's runs used that nothing needs now. A record that cannot be read is reported to
    `skipped` and gone past (what it used is then not offered on its account)."""
    records = []
    for run_id in runs.all_ids():
        record, problem = runs.read(run_id)
        if problem and skipped:
            skipped(f"skipped run {run_id}: {problem}")
        if record is not None and ran_on(record, host):
            records.append(record)
    local_files = not host.is_remote
    images_in_use, live = live_uses(runs, local_files)
    live += [uses_of(r, local_files) for r in records if r.status not in ENDED]
    profiles = lab_profiles(lab)
    keep_snapshots = {u.snapshot for u in live if u.snapshot}
    keep_engines = {u.engine_dir for u in live if u.engine_dir}
    keep_keys = {build_key(p).split("/")[0] for p in profiles if p.build}
    candidates: dict[tuple[str, str], Item] = {}
    image_runs: dict[str, str] = {}
    for record in records:  # oldest first: the newest run wins `last_run`
        used = uses_of(record, local_files)
        if used.image_id:
            image_runs[used.image_id] = record.run_id
        if used.snapshot and used.snapshot not in keep_snapshots and not _named(used.snapshot, profiles, record):
            model = (record.resolved_profile or {}).get("model") or {}
            name = f"{model.get('id')}@{used.snapshot.name}"
            candidates[("model", str(used.snapshot))] = Item("model", name, str(used.snapshot), 0, record.run_id)
        engine = used.engine_dir
        if engine and engine.is_dir() and engine not in keep_engines and engine.name not in keep_keys:
            key = engine.name
            candidates[("engine", str(used.engine_dir))] = Item("engine", key, str(used.engine_dir), 0, record.run_id)
    items = [_sized(i) for i in candidates.values()]
    return _images(image_runs, images_in_use | {u.image_id for u in live}, profiles, records) + items


def ran_on(record: Record, host: HostEntry) -> bool:
    """Records written before hosts existed ran on this machine's Docker."""
    return (record.host_entry or LOCAL) == host.name


def _named(snapshot: Path, profiles: list[Profile], record: Record) -> bool:
    """Whether a profile of this lab names this snapshot's model and revision (by commit or by branch)."""
    cache = Path(str((record.compose.render_options if record.compose else {}).get("cache_dir") or ""))
    return any(find_snapshot(cache, profile.model.id, profile.model.revision) == snapshot for profile in profiles)


def _sized(item: Item) -> Item:
    path = Path(item.where)
    if item.kind != "model":
        return Item(item.kind, item.name, item.where, tree_bytes(path), item.last_run)
    return Item(item.kind, item.name, item.where, sum(b.stat().st_size for b in _blobs_only_here(path)), item.last_run)


def _images(image_runs: dict[str, str], in_use: set[str], profiles: list[Profile], records: list[Record]) -> list[Item]:
    ours = {repository_of(r.image.reference) for r in records if r.image.reference}
    wanted = {p.image.by_digest if p.pinned else p.image.tagged for p in profiles}
    unique = unique_image_bytes()
    items = []
    for image in dk.local_images(set(image_runs) - in_use):
        if not image.references or any(ref in wanted for ref in image.references):
            continue
        if not {repository_of(ref) for ref in image.references} <= ours:
            continue  # someone else also has a name for it: not this home's to remove
        size = unique.get(image.id, image.size)
        items.append(Item("image", image.references[0], image.id, size, image_runs[image.id]))
    return items


def repository_of(reference: str) -> str:
    try:
        return ImageRef.parse(reference).repository
    except ValueError:
        return reference


def _blobs_only_here(snapshot: Path) -> list[Path]:
    """The files removing this snapshot frees: its own regular files, and the blobs no other snapshot links."""
    model_dir = snapshot.parent.parent
    others: set[Path] = set()
    for other in (model_dir / "snapshots").iterdir():
        if other != snapshot:
            others |= {p.resolve() for p in other.rglob("*") if p.is_symlink()}
    freed = []
    for path in snapshot.rglob("*"):
        target = path.resolve()
        if (
            path.is_symlink()
            and target.is_file()
            and target.is_relative_to(model_dir / "blobs")
            and target not in others
        ):
            freed.append(target)
        elif path.is_file() and not path.is_symlink():
            freed.append(path)
    return sorted(set(freed))


def collect(items: list[Item]) -> list[Outcome]:
    outcomes = []
    for item in items:
        try:
            problem = _remove(item)
        except OSError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        outcomes.append(Outcome(item, not problem, problem or ""))
    return outcomes


def _remove(item: Item) -> str | None:
    if item.kind == "image":
        for image in dk.local_images({item.where}):
            for reference in image.references:
                problem = dk.remove_image_reference(reference)
                if problem and dk.local_images({item.where}):  # untagging its last name already removed it
                    return problem
        return "Docker still lists it" if dk.local_images({item.where}) else None
    path = Path(item.where)
    if item.kind == "model":
        model_dir = path.parent.parent
        for blob in _blobs_only_here(path):
            if blob.is_relative_to(model_dir / "blobs"):
                blob.unlink(missing_ok=True)
        remove_tree(path)
        for ref in (model_dir / "refs").glob("**/*"):
            if ref.is_file() and ref.read_text(encoding="utf-8").strip() == path.name:
                ref.unlink()
        if not any((model_dir / "snapshots").iterdir()):
            remove_tree(model_dir)
        return None
    remove_tree(path)
    return None


def as_json(items: list[Item], outcomes: list[Outcome]) -> dict[str, object]:
    done = {o.item.where: o for o in outcomes}
    rows = [
        {
            "kind": i.kind,
            "name": i.name,
            "where": i.where,
            "bytes": i.bytes,
            "last_run": i.last_run,
            "removed": done[i.where].removed if i.where in done else False,
            "problem": done[i.where].problem if i.where in done else "",
        }
        for i in items
    ]
    freed = sum(o.item.bytes for o in outcomes if o.removed)
    return {"items": rows, "bytes": sum(i.bytes for i in items), "bytes_freed": freed}
