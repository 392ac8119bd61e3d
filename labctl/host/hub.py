"""The Hugging Face Hub edge: what a model revision holds (through `huggingface_hub`), and its files
downloaded into the engine's cache in the Hub's own layout, resumably.

huggingface_hub answers the questions (revision -> commit, the file list, each file's ETag and size, the
Hub's refusals as typed errors) and builds the request headers (HF_TOKEN from the environment, never an
argument). The bytes are fetched here because huggingface_hub 2.x writes each download to a
process-unique temporary file and deletes it on failure: an interrupted 65 GB fetch would start over.
Here a partial file keeps a stable name (`blobs/<etag>.incomplete`) and the next fetch asks for the rest
with `Range`. The layout is the one every engine's huggingface_hub reads offline:

    <cache>/hub/models--ORG--NAME/blobs/<etag>                 the file's bytes
    <cache>/hub/models--ORG--NAME/snapshots/<commit>/<path>    a relative symlink to its blob
    <cache>/hub/models--ORG--NAME/refs/<branch>                the commit the branch named when fetched
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from labctl.errors import BadInput, LabctlError

COMMIT = re.compile(r"[0-9a-f]{40}")
ETAG = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # git blob sha1, or an LFS file's sha256
CHUNK = 1 << 20

Progress = Callable[[int], None]  # bytes received so far in this fetch


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    etag: str
    cached: bool  # the snapshot already links it to a complete blob
    partial: int = 0  # bytes of an interrupted download already on disk


@dataclass(frozen=True)
class FetchPlan:
    repo_id: str
    revision: str
    commit: str
    endpoint: str  # scheme://host[:port], no credentials
    files: tuple[HubFile, ...]

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


def endpoint() -> str:
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT") or constants.ENDPOINT


def shown(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def repo_folder(hub_dir: Path, repo_id: str) -> Path:
    return hub_dir / ("models--" + repo_id.replace("/", "--"))


def plan_fetch(repo_id: str, revision: str, hub_dir: Path, where: str) -> FetchPlan:
    """Ask the Hub what `repo_id@revision` holds and compare it with the cache. Nothing is downloaded.
    `where` names the profile field the model came from, for the refusal messages."""
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.hf_api import RepoFile

    base = endpoint()
    api = HfApi(endpoint=base)
    with hub_errors(repo_id, revision, base, where):
        commit = revision if COMMIT.fullmatch(revision) else api.repo_info(repo_id, revision=revision).sha
        if commit is None or not COMMIT.fullmatch(commit):
            raise LabctlError(f"the Hub at {shown(base)} named no commit for {repo_id}@{revision} ({commit!r})")
        entries = [e for e in api.list_repo_tree(repo_id, revision=commit, recursive=True) if isinstance(e, RepoFile)]
        files = []
        for entry in sorted(entries, key=lambda e: e.path):
            meta = get_hf_file_metadata(hf_hub_url(repo_id, entry.path, revision=commit, endpoint=base))
            etag = (meta.etag or "").strip('"')
            if not ETAG.fullmatch(etag) or meta.size is None:
                raise LabctlError(f"the Hub at {shown(base)} gave {entry.path} of {repo_id} no usable ETag or size")
            files.append(_cache_state(hub_dir, repo_id, commit, entry.path, etag, meta.size))
    return FetchPlan(repo_id, revision, commit, shown(base), tuple(files))


def _cache_state(hub_dir: Path, repo_id: str, commit: str, path: str, etag: str, size: int) -> HubFile:
    folder = repo_folder(hub_dir, repo_id)
    if ".." in Path(path).parts or path.startswith("/"):
        raise LabctlError(f"the Hub listed a file outside the repository: {path!r}")
    blob = folder / "blobs" / etag
    link = folder / "snapshots" / commit / path
    cached = link.exists() and blob.is_file() and blob.stat().st_size == size
    partial = folder / "blobs" / f"{etag}.incomplete"
    have = partial.stat().st_size if partial.is_file() and not cached else 0
    return HubFile(path, size, etag, cached, min(have, size))


@contextlib.contextmanager
def hub_errors(repo_id: str, revision: str, base: str, where: str) -> Iterator[None]:
    """The Hub's refusals as one line each: what, where it came from, what to do."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        yield
    except GatedRepoError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        why = "no HF_TOKEN was sent" if status == 401 else "HF_TOKEN's account has not been granted access"
        raise BadInput(
            f"{repo_id} is gated on the Hub at {shown(base)} (HTTP {status}: {why}). Accept its terms on the "
            "model's page with your account, then export HF_TOKEN=<a read token of that account> and fetch again."
        ) from None
    except RepositoryNotFoundError:
        raise BadInput(
            f"{repo_id} does not exist on the Hub at {shown(base)} (or it is private and HF_TOKEN does not grant it): "
            f"check {where}."
        ) from None
    except RevisionNotFoundError:
        raise BadInput(f"{repo_id} has no revision {revision!r} on the Hub at {shown(base)}: check {where}.") from None
    except OfflineModeIsEnabled:
        raise BadInput(
            "HF_HUB_OFFLINE is set in this shell, so labctl cannot ask the Hub: unset it to fetch, or pass --no-fetch "
            "to start from what the cache holds."
        ) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise LabctlError(f"the Hub at {shown(base)} answered HTTP {status} for {repo_id}@{revision}.") from None
    except (OSError, httpx.HTTPError) as exc:
        raise LabctlError(
            f"cannot reach the Hub at {shown(base)} ({type(exc).__name__}): check the network or HF_ENDPOINT; "
            "--no-fetch starts from what the cache holds."
        ) from None
    except Exception as exc:
        if type(exc).__module__.startswith("httpx"):  # huggingface_hub's own HTTP client (httpx2)
            raise LabctlError(
                f"cannot reach the Hub at {shown(base)} ({type(exc).__name__}): check the network or HF_ENDPOINT; "
                "--no-fetch starts from what the cache holds."
            ) from None
        raise


def download(plan: FetchPlan, hub_dir: Path, progress: Progress) -> int:
    """Download what the plan lacks and link the snapshot; returns the bytes received."""
    from huggingface_hub import get_token, hf_hub_url

    folder = repo_folder(hub_dir, plan.repo_id)
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    received = 0
    token = get_token()  # HF_TOKEN (or the user's saved Hub login), read by huggingface_hub; it stays in memory
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def count(n: int) -> None:
        nonlocal received
        received += n
        progress(received)

    with httpx.Client(follow_redirects=True, timeout=httpx.Timeout(60.0, connect=10.0)) as client:
        for file in plan.files:
            blob = folder / "blobs" / file.etag
            if not file.cached and not (blob.is_file() and blob.stat().st_size == file.size):
                url = hf_hub_url(plan.repo_id, file.path, revision=plan.commit, endpoint=plan.endpoint)
                try:
                    _fetch_blob(client, url, headers, blob, file, count)
                except httpx.HTTPError as exc:
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


def _fetch_blob(
    client: httpx.Client, url: str, headers: dict[str, str], blob: Path, file: HubFile, count: Progress
) -> None:
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
        request: dict[str, Any] = {**headers, "Accept-Encoding": "identity"}
        if have:
            request["Range"] = f"bytes={have}-"
        with client.stream("GET", url, headers=request) as response:
            if response.status_code >= 400:
                raise LabctlError(
                    f"{file.path}: the Hub answered HTTP {response.status_code} to the download; its metadata answered "
                    "a moment ago, so try again (fetch resumes)."
                )
            resumed = bool(have) and response.status_code == 206  # a 200 to a Range: start over
            digest = _hasher(file)
            if resumed:
                with open(partial, "rb") as done:
                    for chunk in iter(lambda: done.read(CHUNK), b""):
                        digest.update(chunk)
            with open(partial, "ab" if resumed else "wb") as out:
                for chunk in response.iter_bytes(CHUNK):
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
