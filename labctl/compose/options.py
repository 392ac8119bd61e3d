"""Host-specific choices: where the model cache, built engines and labctl's state live on this host."""

from __future__ import annotations

import os
from pathlib import Path

from labctl.catalog.profiles import Profile
from labctl.compose.render import RenderOptions
from labctl.errors import BadInput


def default_cache_dir() -> str:
    return os.environ.get("LABCTL_CACHE_DIR") or str(Path("~/.cache/huggingface").expanduser())


def default_engine_store() -> str:
    return os.environ.get("LABCTL_ENGINE_STORE") or str(Path("~/.cache/labctl/trt-engines").expanduser())


def render_options(
    profile: Profile,
    cache_dir: str | None,
    allow_unsupported: bool = False,
    **extra: object,
) -> RenderOptions:
    cache = cache_dir or default_cache_dir()
    if not os.path.isabs(cache):
        raise BadInput(f"--cache-dir {cache!r}: give an absolute path.")
    store = default_engine_store() if profile.build else None
    return RenderOptions(cache_dir=cache, engine_store=store, allow_unsupported=allow_unsupported, **extra)  # type: ignore[arg-type]
