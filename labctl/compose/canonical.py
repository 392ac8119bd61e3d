"""What defines a setup, apart from where it ran: the canonical compose file and its hash, and a
side-by-side view of two setups (labctl diff)."""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any

from labctl.catalog.engines import Engine
from labctl.catalog.image import ImageRef
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile
from labctl.catalog.sourcefile import parse_yaml
from labctl.compose.render import RenderOptions, render_compose
from labctl.errors import BadInput
from labctl.run.record import Record

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


@dataclass(frozen=True)
class SetupView:
    """The rows `labctl diff` compares, from a record (or the record inside an export)."""

    source: str
    rows: dict[str, str]
    host_rows: dict[str, str]
    info_rows: dict[str, str]


def setup_view(source: str, record: Record, canonical: str | None) -> SetupView:
    spec = record.resolved_profile or {}
    serve: dict[str, Any] = {}
    if canonical:
        serve = parse_yaml(canonical, "canonical compose", {})["services"]["serve"]
    argv = [*(serve.get("entrypoint") or []), *(serve.get("command") or [])]
    resident = record.resident
    setup = record.engine_setup
    rows = {
        "engine": record.engine,
        "image digest": str(record.image.digest),
        "engine version": _flat(record.engine_version),
        "engine args": " ".join(w.replace("$$", "$") for w in argv) if argv else "?",
        "environment variable names": ", ".join(record.env_names) or "-",
        "model": str((spec.get("model") or {}).get("id", "?")),
        "model revision": str((spec.get("model") or {}).get("revision", "?")),
        "thinking mode": setup.thinking if setup else "?",
        "served model name": record.served_model_name,
        "GPU count": str(record.gpus.count),
        # A deployment kept up for days with keys is another setup than a one-off run of the same engine.
        "resident": f"{resident.restart_policy}, auth {resident.auth}" if resident else "no",
        "labctl version": record.labctl_version or "?",
        "environment label": record.environment_label or "?",
        "compose hash": record.setup.get("compose_sha256", "?"),
    }
    # Pinning a profile changes its hash but not what runs (the digest and compose hash say that).
    info_rows = {"profile hash": record.profile_sha256 or "?", "profile": record.profile}
    host_rows = {
        "GPU ids": ",".join(record.gpus.ids) or "-",
        "port": str(record.endpoint.port),
        "host": record.host or "?",
        "run id": record.run_id,
    }
    return SetupView(source=source, rows=rows, host_rows=host_rows, info_rows=info_rows)


def _flat(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items()) if not isinstance(v, (dict, list)))[:200]
    return str(value)[:200]


def compare(a: SetupView, b: SetupView) -> list[tuple[str, str, str, bool, str]]:
    """(field, value A, value B, same, kind) rows; kind 'setup' rows decide identity, 'info' and 'host'
    rows are shown only."""
    out = [(k, a.rows[k], b.rows[k], a.rows[k] == b.rows[k], "setup") for k in a.rows]
    out += [(k, a.info_rows[k], b.info_rows[k], a.info_rows[k] == b.info_rows[k], "info") for k in a.info_rows]
    out += [(k, a.host_rows[k], b.host_rows[k], a.host_rows[k] == b.host_rows[k], "host") for k in a.host_rows]
    return out
