"""A model revision's files in the Hugging Face cache layout, downloaded resumably — with the standard library
only, so that the same code runs on this machine and, for a host reached over ssh://, in labctl's client
image on that host (labctl/host/hub/fetch_job.py). What a revision holds is asked of the Hub elsewhere
(labctl/host/hub/revisions.py, through huggingface_hub); this module only compares, downloads and links.

A partial file keeps a stable name (`blobs/<etag>.incomplete`) and the next fetch asks for the rest with
`Range`; every blob is checked against its ETag (the content's hash) before it gets its name. The layout is
the one every engine's huggingface_hub reads offline:

    <cache>/hub/models--ORG--NAME/blobs/<etag>                 the file's bytes
    <cache>/hub/models--ORG--NAME/snapshots/<commit>/<path>    a relative symlink to its blob
    <cache>/hub/models--ORG--NAME/refs/<branch>                the commit the branch named when fetched
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import http.client
import os
import re
import secrets
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labctl.catalog.hub_names import is_repo_id, is_revision
from labctl.errors import LabctlError

COMMIT = re.compile(r"[0-9a-f]{40}")
ETAG = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # git blob sha1, or an LFS file's sha256
CHUNK = 1 << 20
TIMEOUT_S = 60.0

Progress = Callable[[int], None]  # bytes received so far in this fetch


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    etag: str
    cached: bool  # the snapshot already links it to a complete blob
    partial: int = 0  # bytes of an interrupted download already on disk
    url: str = ""  # where the Hub serves it at the commit


@dataclass(frozen=True)
class FetchPlan:
    repo_id: str
    revision: str
    commit: str
    endpoint: str  # scheme://host[:port], no credentials
    files: tuple[HubFile, ...]
    repo_type: str = "model"  # or "dataset": the cache keeps them apart (models--…, datasets--…)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def missing_bytes(self) -> int:
        """What still has to come over the network (a partial file counts only its rest)."""
        return sum(f.size - f.partial for f in self.files if not f.cached)

    @property
    def cached(self) -> bool:
        return all(f.cached for f in self.files)

    def against(self, hub_dir: Path) -> FetchPlan:
        """The same files, compared with what this cache holds."""
        files = tuple(
            dataclasses.replace(
                cache_state(hub_dir, self.repo_id, self.commit, f.path, f.etag, f.size, self.repo_type), url=f.url
            )
            for f in self.files
        )
        return dataclasses.replace(self, files=files)


def repo_folder(hub_dir: Path, repo_id: str, repo_type: str = "model") -> Path:
    return hub_dir / (f"{repo_type}s--" + repo_id.replace("/", "--"))


def cache_state(
    hub_dir: Path, repo_id: str, commit: str, path: str, etag: str, size: int, repo_type: str = "model"
) -> HubFile:
    folder = repo_folder(hub_dir, repo_id, repo_type)
    if ".." in Path(path).parts or path.startswith("/") or not ETAG.fullmatch(etag):
        raise LabctlError(f"the Hub listed a file outside the repository, or without a usable ETag: {path!r}")
    blob = folder / "blobs" / etag
    link = folder / "snapshots" / commit / path
    cached = link.exists() and blob.is_file() and blob.stat().st_size == size
    partial = folder / "blobs" / f"{etag}.incomplete"
    have = partial.stat().st_size if partial.is_file() and not cached else 0
    return HubFile(path, size, etag, cached, min(have, size))


def download(plan: FetchPlan, hub_dir: Path, progress: Progress, token: str | None) -> int:
    """Download what the plan lacks and link the snapshot; returns the bytes received. The token goes to the
    Hub only: never to a host it redirects to."""
    folder = repo_folder(hub_dir, plan.repo_id, plan.repo_type)
    check_paths(plan, hub_dir)
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    received = 0

    def count(n: int) -> None:
        nonlocal received
        received += n
        progress(received)

    for file in plan.files:
        blob = folder / "blobs" / file.etag
        if not file.cached and not (blob.is_file() and blob.stat().st_size == file.size):
            try:
                _fetch_blob(file.url, token, blob, file, count)
            except (OSError, http.client.HTTPException) as exc:
                raise LabctlError(
                    f"the download of {file.path} from {plan.endpoint} broke off ({type(exc).__name__}) after "
                    f"{received} bytes: fetch again, it resumes where it stopped."
                ) from None
        _link(folder, plan.commit, file.path, blob)
    if not COMMIT.fullmatch(plan.revision):
        refs = folder / "refs" / plan.revision
        refs.parent.mkdir(parents=True, exist_ok=True)
        tmp = refs.with_name(_private_name(refs.name))
        tmp.write_text(plan.commit, encoding="ascii")  # huggingface_hub writes no trailing newline
        os.replace(tmp, refs)
    return received


def check_paths(plan: FetchPlan, hub_dir: Path) -> None:
    """Every path the plan would write, checked before anything is written: the repo id, revision, commit, file
    paths and ETags come from a profile, an export or the Hub, and each must stay inside its own folder."""
    if not is_repo_id(plan.repo_id) or not is_revision(plan.revision) or not COMMIT.fullmatch(plan.commit):
        raise LabctlError(
            f"{plan.repo_id!r}@{plan.revision!r} (commit {plan.commit!r}) is not a Hub repo id, revision and commit: "
            "nothing was written. Fix model.id and model.revision."
        )
    folder = repo_folder(hub_dir, plan.repo_id, plan.repo_type)
    paths = [(hub_dir, folder)]
    if not COMMIT.fullmatch(plan.revision):
        paths.append((folder / "refs", folder / "refs" / plan.revision))
    for file in plan.files:
        if not ETAG.fullmatch(file.etag):
            raise LabctlError(f"the Hub gave {file.path!r} no usable ETag ({file.etag!r}): nothing was written.")
        paths.append((folder / "blobs", folder / "blobs" / file.etag))
        paths.append((folder / "snapshots" / plan.commit, folder / "snapshots" / plan.commit / file.path))
    for root, path in paths:
        inside(root, path, hub_dir)


def inside(root: Path, path: Path, cache: Path) -> Path:
    """`path`, refused unless it stays below `root` as written and, symlinks resolved, below `cache`."""
    real_cache = os.path.realpath(cache)
    real = os.path.realpath(path)
    plain_root, plain = os.path.normpath(root), os.path.normpath(path)
    for top, below in ((plain_root, plain), (real_cache, real)):
        if below == top or os.path.commonpath([top, below]) != top:
            raise LabctlError(
                f"{path} would be written at {real}, outside {top}: a name from a profile, an export or the Hub, or "
                "a symlink in the cache, would take it there. Nothing was written."
            )
    return path


def _fetch_blob(url: str, token: str | None, blob: Path, file: HubFile, count: Progress) -> None:
    partial = blob.with_name(f"{blob.name}.incomplete")
    locks = blob.parents[2] / ".locks" / blob.parents[1].name  # where huggingface_hub keeps its own
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{blob.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two fetches of one model never append to one partial file
        if blob.is_file() and blob.stat().st_size == file.size:
            return
        have = partial.stat().st_size if partial.is_file() else 0
        if have > file.size:
            partial.unlink()
            have = 0
        request = urllib.request.Request(url, headers={"Accept-Encoding": "identity"})
        if token:
            request.add_unredirected_header("Authorization", f"Bearer {token}")
        if have:
            request.add_header("Range", f"bytes={have}-")
        try:
            response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
        except urllib.error.HTTPError as exc:
            exc.close()
            raise LabctlError(
                f"{file.path}: the Hub answered HTTP {exc.code} to the download; its metadata answered "
                "a moment ago, so try again (fetch resumes)."
            ) from None
        with response:
            resumed = bool(have) and response.status == 206  # a 200 to a Range: start over
            digest = _hasher(file)
            if resumed:
                with open(partial, "rb") as done:
                    for chunk in iter(lambda: done.read(CHUNK), b""):
                        digest.update(chunk)
            with open(partial, "ab" if resumed else "wb") as out:
                for chunk in iter(lambda: response.read(CHUNK), b""):
                    out.write(chunk)
                    digest.update(chunk)
                    count(len(chunk))
        size = partial.stat().st_size
        if size != file.size:
            raise LabctlError(
                f"{file.path}: the Hub sent {size} of {file.size} bytes; fetch again to resume from byte {size}."
            )
        if digest.hexdigest() != file.etag:
            partial.unlink()
            raise LabctlError(
                f"{file.path}: the downloaded bytes do not match the Hub's hash {file.etag} (a damaged partial "
                "file, or a changed file): it was deleted; fetch again to download it whole."
            )
        os.replace(partial, blob)


def _hasher(file: HubFile) -> Any:
    """The Hub's ETag is the content's hash: sha256 for an LFS file, git's blob sha1 for the others."""
    if len(file.etag) == 64:
        return hashlib.sha256()
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update(b"blob %d\0" % file.size)
    return digest


def _link(folder: Path, commit: str, path: str, blob: Path) -> None:
    link = folder / "snapshots" / commit / path
    link.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(blob, link.parent)
    if link.is_symlink() and os.readlink(link) == target:
        return
    tmp = link.with_name(_private_name(link.name))
    tmp.symlink_to(target)
    os.replace(tmp, link)


def _private_name(name: str) -> str:
    """A temporary name no concurrent fetch of the same model uses (two `up`s may fetch it at once)."""
    return f".{name}.{os.getpid()}-{secrets.token_hex(4)}.labctl-tmp"
