"""The Hugging Face Hub edge: what a model revision holds, asked through `huggingface_hub` (revision ->
commit, the file list, each file's ETag and size, the Hub's refusals as typed errors; HF_TOKEN from the
environment, never an argument). The bytes are fetched by labctl/host/hub/cache.py, resumably: huggingface_hub
2.x writes each download to a process-unique temporary file and deletes it on failure, so an interrupted 65 GB
fetch would start over."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from labctl.catalog.hub_names import is_repo_id, is_revision
from labctl.errors import BadInput, LabctlError
from labctl.host.hub import cache as hub_cache
from labctl.host.hub.cache import COMMIT, ETAG, FetchPlan, HubFile, Progress


def endpoint() -> str:
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT") or constants.ENDPOINT


def shown(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def plan_fetch(
    repo_id: str,
    revision: str,
    hub_dir: Path | None,
    where: str,
    repo_type: str = "model",
    base: str | None = None,
    only: tuple[str, ...] | None = None,
) -> FetchPlan:
    """Ask the Hub what `repo_id@revision` holds and compare it with the cache (None: a cache on another
    host, compared there). Nothing is downloaded. `where` names the profile field the model came from, for
    the refusal messages; `only` keeps just those files (a workload needs one file of a dataset repository)."""
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.hf_api import RepoFile

    if not is_repo_id(repo_id) or not is_revision(revision):
        raise BadInput(
            f"{repo_id!r}@{revision!r} is not a Hub repo id and revision: check {where}. Nothing was fetched."
        )
    base = base or endpoint()
    api = HfApi(endpoint=base)
    commit = resolve_commit(repo_id, revision, where, repo_type, base)
    with hub_errors(repo_id, revision, base, where):
        tree = api.list_repo_tree(repo_id, revision=commit, recursive=True, repo_type=repo_type)
        entries = [e for e in tree if isinstance(e, RepoFile) and (only is None or e.path in only)]
        if only is not None and len(entries) != len(only):
            lacking = sorted(set(only) - {e.path for e in entries})
            raise BadInput(f"{repo_id}@{revision} on the Hub at {shown(base)} holds no {lacking[0]}: check {where}.")
        files = []
        for entry in sorted(entries, key=lambda e: e.path):
            url = hf_hub_url(repo_id, entry.path, revision=commit, endpoint=base, repo_type=repo_type)
            meta = get_hf_file_metadata(url)
            etag = (meta.etag or "").strip('"')
            if not ETAG.fullmatch(etag) or meta.size is None:
                raise LabctlError(f"the Hub at {shown(base)} gave {entry.path} of {repo_id} no usable ETag or size")
            files.append(HubFile(entry.path, meta.size, etag, cached=False, url=url))
    plan = FetchPlan(repo_id, revision, commit, shown(base), tuple(files), repo_type)
    return plan.against(hub_dir) if hub_dir is not None else plan


def list_files(repo_id: str, commit: str, where: str, repo_type: str = "model", base: str | None = None) -> list[str]:
    """Every file path of `repo_id` at `commit` (nothing downloaded)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    base = base or endpoint()
    with hub_errors(repo_id, commit, base, where):
        tree = HfApi(endpoint=base).list_repo_tree(repo_id, revision=commit, recursive=True, repo_type=repo_type)
        return sorted(e.path for e in tree if isinstance(e, RepoFile))


def resolve_commit(repo_id: str, revision: str, where: str, repo_type: str = "model", base: str | None = None) -> str:
    """The commit a branch or tag names on the Hub now (a commit is its own answer); nothing is downloaded."""
    from huggingface_hub import HfApi

    if not is_repo_id(repo_id) or not is_revision(revision):
        raise BadInput(f"{repo_id!r}@{revision!r} is not a Hub repo id and revision: check {where}.")
    if COMMIT.fullmatch(revision):
        return revision
    base = base or endpoint()
    with hub_errors(repo_id, revision, base, where):
        commit = HfApi(endpoint=base).repo_info(repo_id, revision=revision, repo_type=repo_type).sha
    if commit is None or not COMMIT.fullmatch(commit):
        raise LabctlError(f"the Hub at {shown(base)} named no commit for {repo_id}@{revision} ({commit!r})")
    return commit


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


def token() -> str | None:
    """HF_TOKEN (or the user's saved Hub login), as huggingface_hub finds it; kept in memory only."""
    from huggingface_hub import get_token

    return get_token()


def download(plan: FetchPlan, hub_dir: Path, progress: Progress) -> int:
    """Download what the plan lacks into this machine's cache and link the snapshot; the bytes received."""
    return hub_cache.download(plan, hub_dir, progress, token())
