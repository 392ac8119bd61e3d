"""Host-specific choices: where the model cache, built engines and labctl's state live on this host."""

from __future__ import annotations

import os
from pathlib import Path

from labctl.catalog.profiles import Profile, printable
from labctl.compose.render import RenderOptions
from labctl.errors import BadInput


def default_cache_dir() -> str:
    return os.environ.get("LABCTL_CACHE_DIR") or str(Path("~/.cache/huggingface").expanduser())


def default_engine_store() -> str:
    return os.environ.get("LABCTL_ENGINE_STORE") or str(Path("~/.cache/labctl/trt-engines").expanduser())


def check_cache_dir(cache_dir: str | None, remote_host: str | None = None) -> str:
    """The model cache a run mounts (--cache-dir, else the default), refused before anything is fetched,
    written or started when it is not an absolute path of one plain line."""
    if cache_dir is not None and not cache_dir.strip():
        raise BadInput("--cache-dir '': give an absolute path, or leave the option out for the default.")
    cache = cache_dir or default_cache_dir()
    if not os.path.isabs(cache):
        raise BadInput(f"--cache-dir {cache!r}: give an absolute path.")
    if not printable(cache):
        raise BadInput(f"--cache-dir {cache[:80]!r}: control characters (a newline, ESC, …) are refused in a path.")
    if remote_host is not None and ("," in cache or ":" in cache):
        raise BadInput(
            f"--cache-dir {cache!r}: a path on {remote_host} is mounted as PATH:/cache, so it may hold no ':' or ','."
        )
    return cache


def render_options(
    profile: Profile,
    cache_dir: str | None,
    allow_unsupported: bool = False,
    **extra: object,
) -> RenderOptions:
    cache = check_cache_dir(cache_dir)
    store = default_engine_store() if profile.build else None
    return RenderOptions(cache_dir=cache, engine_store=store, allow_unsupported=allow_unsupported, **extra)  # type: ignore[arg-type]
