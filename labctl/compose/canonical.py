"""What defines a setup, apart from where it ran: the canonical compose file and its hash."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from labctl.catalog.engines import Engine
from labctl.catalog.image import ImageRef
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile
from labctl.compose.render import RenderOptions, render_compose
from labctl.errors import BadInput

# Host-specific values are replaced by these before hashing: two runs of one setup on different
# hosts, GPUs, ports or cache folders hash the same.
CANONICAL_CACHE = "/host/model-cache"
CANONICAL_ENGINES = "/host/engine-store"


def digest_reference(spec: dict[str, Any], digest: str | None) -> str:
    """`repository@sha256:…`: the image as a digest names it, whatever tag the profile used."""
    ref = ImageRef.parse(spec["image"])
    try:
        return ref.with_digest(digest).by_digest if digest else ref.tagged
    except ValueError as exc:
        raise BadInput(f"the recorded image digest: {exc}. The record or export was edited by hand.") from None


def canonical_profile(engine: Engine, name: str, spec: dict[str, Any], digest: str | None) -> Profile:
    canon = copy.deepcopy(spec)
    canon["image"] = digest_reference(spec, digest)
    canon["unpinned"] = False
    canon["port"] = engine.default_port
    canon["host"] = "127.0.0.1"
    gpus = spec.get("gpus") or {}
    if gpus.get("device_ids"):
        canon["gpus"] = {"device_ids": [str(i) for i in range(len(gpus["device_ids"]))]}
    return Profile(engine=engine, name=name, spec=canon, source=None)


def canonical_compose(
    lab: Lab, engine: Engine, name: str, spec: dict[str, Any], digest: str | None, allow_unsupported: bool
) -> str:
    profile = canonical_profile(engine, name, spec, digest)
    options = RenderOptions(
        cache_dir=CANONICAL_CACHE,
        engine_store=CANONICAL_ENGINES if spec.get("build") else None,
        allow_unsupported=allow_unsupported,
    )
    return render_compose(lab, profile, options)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
