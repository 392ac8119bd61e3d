"""labctl gc: what this home itself put on a host and nothing needs any more — images, model and dataset snapshots (the
Hugging Face cache layout, `models--org--name/snapshots/<commit>`) and TensorRT-LLM engine folders.

Only what this home's acquisitions ledger (run/records/acquired.py) says labctl pulled, built, copied or
fetched is ever a candidate: a run record says what a run used, which is no evidence that this home put it
there (a record is easily edited, and an image a run found already present is someone else's). A candidate
is kept when a run of this home that has not ended uses it, when any container on the host uses it (running
or stopped, whichever home started it), when any record of another home uses it (homes found through the
containers' labels and the host's list of homes, host/homes.py), when another image is built on it, when a
name it carries is not one this home gave it, or when a profile of this lab names it.

A run record of this home that cannot be read may use anything: gc still lists, but `--yes` then removes
nothing until that record is restored or moved away.

gc acts on one host (--host). On a host reached over ssh://, model snapshots and engine folders live on that
machine's disks, out of this controller's reach: only its images are collected there."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from labctl.catalog.engines import list_engine_names
from labctl.catalog.hosts_file import LOCAL, LOCAL_HOST, HostEntry
from labctl.catalog.image import ImageRef
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile, list_profile_names, load_profile
from labctl.compose.labels import RunLabels
from labctl.compose.render import build_key
from labctl.errors import LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.docker.engine_api import unique_image_bytes
from labctl.host.files.atomic import remove_tree, tree_bytes
from labctl.host.homes import known_homes
from labctl.run.records.acquired import ACQUIRED, Acquisition, Action, Kind, Ledger
from labctl.run.records.record import Record
from labctl.run.records.store import ENDED, Runs

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
    return [d for d in (cache_dir / "hub" / name, cache_dir / name) if _visible_dir(d)]


def _visible_dir(path: Path) -> bool:
    """A folder this user can see; another user's private cache (a record there names it) is none: nothing this
    user's gc could remove lies in it."""
    try:
        return path.is_dir()
    except PermissionError:
        return False


def find_snapshot(cache_dir: Path, model_id: str, revision: str) -> Path | None:
    """The snapshot folder of a revision (a commit hash, or a branch/tag the cache's refs/ resolves). Names
    come from records and profiles: anything that could step outside the cache finds nothing."""
    if not _MODEL_ID.match(model_id) or not (_COMMIT.match(revision) or _REF_NAME.match(revision)):
        return None
    for folder in model_dirs(cache_dir, model_id):
        commit = revision
        try:
            if not _COMMIT.match(revision):
                ref = folder / "refs" / revision
                commit = ref.read_text(encoding="utf-8").strip()[:40] if ref.is_file() else ""
            snapshot = folder / "snapshots" / commit
            if _COMMIT.match(commit) and snapshot.is_dir() and not snapshot.is_symlink():
                return snapshot
        except PermissionError:  # a part of another user's cache this user may not read
            continue
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


@dataclass(frozen=True)
class Garbage:
    items: list[Item]
    unreadable: list[str]  # this home's records gc could not read: `--yes` removes nothing while any remain


@dataclass
class Needed:
    """What must stay: images by id, snapshot and engine folders."""

    images: set[str] = field(default_factory=set)
    snapshots: set[Path] = field(default_factory=set)
    engines: set[Path] = field(default_factory=set)

    def add(self, used: Uses) -> None:
        if used.image_id:
            self.images.add(used.image_id)
        if used.snapshot:
            self.snapshots.add(real(used.snapshot))
        if used.engine_dir:
            self.engines.add(real(used.engine_dir))


def real(path: Path) -> Path:
    """One spelling per folder: a record and the ledger may reach one cache through different paths."""
    return Path(os.path.realpath(path))


def other_homes(runs: Runs, labelled: set[str]) -> list[Runs]:
    """Every other home labctl can see from here: those the host's containers name, and those that ran
    something on this machine (host/homes.py)."""
    mine = runs.home.resolve()
    found: dict[Path, Runs] = {}
    for folder in [*(Path(text) for text in labelled if text), *known_homes()]:
        try:
            resolved = folder.resolve()
        except OSError:
            continue
        if resolved != mine and resolved.is_absolute() and resolved not in found:
            found[resolved] = Runs(resolved)
    return list(found.values())


def needed_now(
    runs: Runs, records: list[Record], local_files: bool, skipped: Callable[[str], None] | None = None
) -> Needed:
    """Images any container uses; what this home's runs that have not ended use; what any record of any other
    home uses (a record there that cannot be read is passed over: that home's own gc answers for it, and a home
    this user may not read, another user's private one, is said to `skipped`)."""
    needed, labelled = Needed(), set()
    for image_id, labels in dk.containers_and_images():
        needed.images.add(image_id)
        run = RunLabels.from_labels(labels) if dk.RUN_LABEL in labels else None
        if run is not None:
            labelled.add(run.home)
    for record in records:
        if record.status not in ENDED:
            needed.add(uses_of(record, local_files))
    private = []
    for home in other_homes(runs, labelled):
        try:
            run_ids = home.all_ids()
        except PermissionError:
            private.append(str(home.home))
            continue
        for run_id in run_ids:
            theirs = home.try_load(run_id)
            if theirs is not None:
                needed.add(uses_of(theirs, local_files))
    if private and skipped:
        named = ", ".join(private[:3]) + (f" and {len(private) - 3} more" if len(private) > 3 else "")
        skipped(
            f"skipped {len(private)} home(s) this user may not read (another user's private homes): {named}; what "
            "their ended runs used is not known here, while their containers keep their images either way"
        )
    return needed


def find_garbage(
    lab: Lab,
    runs: Runs,
    host: HostEntry = LOCAL_HOST,
    skipped: Callable[[str], None] | None = None,
    datasets: set[tuple[str, str]] | None = None,
) -> Garbage:
    """What this home acquired on `host` that nothing needs now. A record or ledger line that cannot be read
    is reported to `skipped`; an unreadable record also goes into `unreadable` (see Garbage). `datasets`: the
    (repository, commit) pairs the lab's task sets pin (None: unknown, so no dataset is offered)."""
    records, unreadable = [], []
    for run_id in runs.all_ids():
        record, problem = runs.read(run_id)
        if problem:
            unreadable.append(problem)
            if skipped:
                skipped(f"skipped run {run_id}: {problem}")
        if record is not None and ran_on(record, host):
            records.append(record)
    entries, problems = Ledger(runs.home).read()
    for problem in problems:
        if skipped:
            skipped(f"skipped {problem}")
    ours = [e for e in entries if e.action in ACQUIRED and e.host == host.name]
    local_files = not host.is_remote
    needed = needed_now(runs, records, local_files, skipped)
    profiles = lab_profiles(lab)
    last_run = newest_runs(records, local_files)
    items = _images([e for e in ours if e.kind is Kind.IMAGE], needed, profiles, last_run)
    if local_files:
        items += _snapshots([e for e in ours if e.kind is Kind.MODEL], needed, profiles, last_run)
        items += _engines([e for e in ours if e.kind is Kind.ENGINE], needed, profiles, last_run)
        items += _datasets([e for e in ours if e.kind is Kind.DATASET], datasets)
    return Garbage(items, unreadable)


def ran_on(record: Record, host: HostEntry) -> bool:
    """Records written before hosts existed ran on this machine's Docker."""
    return (record.host_entry or LOCAL) == host.name


def newest_runs(records: list[Record], local_files: bool) -> dict[str, str]:
    """The newest run of this home that used each image id and folder (records are oldest first)."""
    newest: dict[str, str] = {}
    for record in records:
        used = uses_of(record, local_files)
        for key in (used.image_id, str(used.snapshot or ""), str(used.engine_dir or "")):
            if key:
                newest[key] = record.run_id
    return newest


def _images(entries: list[Acquisition], needed: Needed, profiles: list[Profile], last: dict[str, str]) -> list[Item]:
    if not entries:
        return []
    daemon = dk.daemon_facts().id
    names: dict[str, set[str]] = {}
    runs: dict[str, str] = {}
    for entry in entries:
        if daemon and entry.docker_host_id != daemon:
            continue  # an image id names an image on one daemon: a line that does not say which names none
        names.setdefault(entry.image_id, set()).update(normal(r) for r in entry.references)
        runs[entry.image_id] = entry.run_id or ""
    wanted = {normal(p.image.by_digest if p.pinned else p.image.tagged) for p in profiles}
    candidates = dk.local_images(set(names) - needed.images)
    if not candidates:
        return []
    bases = set(dk.image_parents().values())
    unique = unique_image_bytes()
    items = []
    for image in candidates:
        references = {normal(r) for r in image.references}
        if not references or references & wanted or image.id in bases:
            continue  # untagged (nothing to name it by), wanted by a profile, or another image is built on it
        if not all(_given(reference, names[image.id]) for reference in references):
            continue  # someone else also has a name for it: not this home's to remove
        size = unique.get(image.id, image.size)
        items.append(Item("image", image.references[0], image.id, size, last.get(image.id) or runs[image.id]))
    return items


def _given(reference: str, names: set[str]) -> bool:
    """Whether a name the image carries is one this home gave it: one it pulled or built it as, or the
    registry's digest name of such a repository (Docker adds those on a pull or a push)."""
    if reference in names:
        return True
    repository, at, _digest = reference.partition("@")
    return bool(at) and repository in {repository_of(name) for name in names}


def _snapshots(entries: list[Acquisition], needed: Needed, profiles: list[Profile], last: dict[str, str]) -> list[Item]:
    items: dict[Path, Item] = {}
    for entry in entries:
        snapshot = Path(entry.folder)
        if entry.action is not Action.FETCHED or not is_snapshot(snapshot) or real(snapshot) in needed.snapshots:
            continue
        if _named(snapshot, profiles):
            continue
        run = last.get(str(snapshot)) or entry.run_id or ""
        items[snapshot] = _sized(Item("model", entry.name or snapshot.name, str(snapshot), 0, run))
    return list(items.values())


def _engines(entries: list[Acquisition], needed: Needed, profiles: list[Profile], last: dict[str, str]) -> list[Item]:
    keep_keys = {build_key(p).split("/")[0] for p in profiles if p.build}
    items: dict[Path, Item] = {}
    for entry in entries:
        folder = Path(entry.folder)
        if entry.action is not Action.BUILT or not is_engine_build(folder):
            continue
        if real(folder) in needed.engines or folder.name in keep_keys:
            continue
        run = last.get(str(folder)) or entry.run_id or ""
        items[folder] = _sized(Item("engine", folder.name, str(folder), 0, run))
    return list(items.values())


def _datasets(entries: list[Acquisition], pinned: set[tuple[str, str]] | None) -> list[Item]:
    if pinned is None:
        return []
    kept = {"datasets--" + repo.replace("/", "--") + "/" + commit for repo, commit in pinned}
    items: dict[Path, Item] = {}
    for entry in entries:
        snapshot = Path(entry.folder)
        if entry.action is not Action.FETCHED or not is_snapshot(snapshot, "datasets--"):
            continue
        if f"{snapshot.parent.parent.name}/{snapshot.name}" in kept:
            continue
        items[snapshot] = _sized(Item("dataset", entry.name or snapshot.name, str(snapshot), 0, ""))
    return list(items.values())


def is_engine_build(folder: Path) -> bool:
    """What one engine build makes, STORE/<key>/<served name>/config.json: a ledger line naming any other
    folder names nothing gc removes."""
    if not (folder.is_absolute() and ".." not in folder.parts and _KEY.match(folder.name)):
        return False
    if folder.is_symlink() or not folder.is_dir():
        return False
    return any(
        not sub.is_symlink() and (sub / "config.json").is_file() and not (sub / "config.json").is_symlink()
        for sub in folder.iterdir()
    )


def is_snapshot(path: Path, prefix: str = "models--") -> bool:
    """A Hugging Face cache snapshot folder, `…/models--org--name/snapshots/<commit>` (or `datasets--`), as
    labctl fetches them: a ledger line naming any other folder names nothing gc removes."""
    model_dir = path.parent.parent
    return (
        path.is_absolute()
        and ".." not in path.parts
        and _COMMIT.match(path.name) is not None
        and path.parent.name == "snapshots"
        and model_dir.name.startswith(prefix)
        and path.is_dir()
        and not path.is_symlink()
        and not model_dir.is_symlink()
        and (model_dir / "blobs").is_dir()
    )


def _named(snapshot: Path, profiles: list[Profile]) -> bool:
    """Whether a profile of this lab names this snapshot's model and revision (by commit or by branch)."""
    model_dir = snapshot.parent.parent
    for profile in profiles:
        if model_dir.name != "models--" + profile.model.id.replace("/", "--"):
            continue
        revision = profile.model.revision
        if revision == snapshot.name:
            return True
        ref = model_dir / "refs" / revision
        if _REF_NAME.match(revision) and ref.is_file() and ref.read_text(encoding="utf-8").strip() == snapshot.name:
            return True
    return False


def _sized(item: Item) -> Item:
    path = Path(item.where)
    if item.kind not in ("model", "dataset"):
        return Item(item.kind, item.name, item.where, tree_bytes(path), item.last_run)
    return Item(item.kind, item.name, item.where, sum(b.stat().st_size for b in _blobs_only_here(path)), item.last_run)


def normal(reference: str) -> str:
    """Docker's own spelling of a reference (it drops docker.io/ and library/ from Docker Hub names)."""
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/", "index.docker.io/"):
        if reference.startswith(prefix):
            rest = reference.removeprefix(prefix)
            return rest.removeprefix("library/") if "/" in rest.removeprefix("library/") else rest
    return reference


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
    in_use = (
        {image_id for image_id, _labels in dk.containers_and_images()}
        if any(i.kind == "image" for i in items)
        else set()
    )
    outcomes = []
    for item in items:
        if item.kind == "image" and item.where in in_use:  # a container made since the listing
            outcomes.append(Outcome(item, False, "a container uses it now"))
            continue
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
    if item.kind in ("model", "dataset"):
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
