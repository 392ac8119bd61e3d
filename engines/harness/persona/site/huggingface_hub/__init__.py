"""labctl persona stand-in for `huggingface_hub` (persona image only; not the real library).

Only `snapshot_download(repo_id, revision=None, ...)` exists, and it never downloads: it resolves the
Hugging Face cache layout under $HF_HUB_CACHE (else $HF_HOME/hub, else ~/.cache/huggingface/hub):
models--ORG--NAME/refs/REVISION holds a commit, models--ORG--NAME/snapshots/COMMIT is the snapshot.
A snapshot that is not in the cache raises LocalEntryNotFoundError (as the real library does offline):
the stand-in does not invent model files. Pre-seed the cache (tests do) to build.
"""

import os
import re
from pathlib import Path

__version__ = "0.0.0+labctl-persona-stand-in"


class LocalEntryNotFoundError(FileNotFoundError):
    pass


def _cache_dir(cache_dir=None):
    if cache_dir:
        return Path(cache_dir)
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def snapshot_download(repo_id, revision=None, cache_dir=None, repo_type=None, **_ignored):
    revision = revision or "main"
    folder = _cache_dir(cache_dir) / ("models--" + repo_id.replace("/", "--"))
    commit = revision
    if not re.fullmatch(r"[0-9a-f]{40}", revision):
        ref = folder / "refs" / revision
        if not ref.is_file():
            raise LocalEntryNotFoundError(
                f"{repo_id}@{revision}: no {ref} (labctl persona stand-in of huggingface_hub: it resolves the "
                "local cache only and cannot download; pre-seed the cache)"
            )
        commit = ref.read_text().strip()
    snapshot = folder / "snapshots" / commit
    if not snapshot.is_dir():
        raise LocalEntryNotFoundError(
            f"{repo_id}@{revision}: snapshot {snapshot} is not in the cache (labctl persona stand-in: no download)"
        )
    return str(snapshot)
