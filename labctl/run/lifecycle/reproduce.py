"""Rebuild a recorded setup from an export (or a record): same image digest, same engine arguments,
same model revision; only host-specific values change. The export itself is records/export.py."""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from typing import Any

from labctl.catalog.hosts_file import LOCAL_HOST, HostEntry
from labctl.catalog.image import ImageRef
from labctl.catalog.lab import Lab
from labctl.catalog.limits import check_seconds
from labctl.catalog.profiles import Profile, with_overrides
from labctl.errors import BadInput
from labctl.run.records.export import (
    Export,
    content_problem,
    load_source,
    recomputed_compose_hash,
    recorded_profile,
    render_recorded,
    same_compose,
)
from labctl.run.records.record import Record, Reproduction
from labctl.run.records.store import Runs
from labctl.run.resident.resident_plan import check_bind


def unified(a: str, b: str, a_name: str, b_name: str) -> str:
    return "".join(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True), a_name, b_name))


@dataclass
class Verification:
    broken: list[str]  # the file itself cannot be believed: never excused
    problems: list[str]  # the setup renders otherwise here: excused by --allow-render-drift
    diff: str


def verify(lab: Lab, export: Export, profile: Profile) -> Verification:
    """The export must be intact (content hash, a compose text that its own setup renders to) and must
    re-render here to the compose file it carries."""
    broken, problems = [], []
    damaged = content_problem(export)
    if damaged:
        broken.append(damaged)
    rerendered = render_recorded(lab, export, profile)
    canonical = recomputed_compose_hash(lab, export, profile)
    diff = ""
    if rerendered != export.compose:
        diff = unified(export.compose, rerendered, "recorded compose.yaml", "re-rendered from setup")
    if not same_compose(export.compose, rerendered) and canonical == export.setup["compose_sha256"]:
        # the setup renders here exactly as it did there, yet the text differs: the text was edited
        broken.append("its compose text is not what its own setup renders to (edited by hand?)")
    elif rerendered != export.compose:
        problems.append("the recorded compose file differs from what its setup renders to here")
    if canonical != export.setup["compose_sha256"]:
        problems.append(f"compose hash mismatch: recorded {export.setup['compose_sha256']}, re-rendered {canonical}")
    return Verification(broken=broken, problems=problems, diff=diff)


def pinned_for_reproduction(
    export: Export, profile: Profile, gpus: list[str] | None, port: int | None, local_id: str | None = None
) -> Profile:
    """The recorded setup pinned to the recorded image: by digest, or (a local image that no registry gave a
    digest, such as `make vllm-cpu-image`'s) by the local image's id, which must be the recorded one."""
    digest = export.setup["image"].get("digest")
    recorded_id = export.setup["image"].get("image_id")
    if not digest and recorded_id:
        reference = export.setup["image"].get("reference")
        if local_id != recorded_id:
            raise BadInput(
                f"{export.source}: the run used the local image {reference} (id {recorded_id}), which no registry "
                f"gave a digest; here {reference} is {f'id {local_id}' if local_id else 'missing'}. Rebuild that "
                "image, or push it to a registry and pin its digest in the profile. Nothing was started."
            )
        return with_overrides(profile, gpus=gpus, port=port)
    if not digest:
        raise BadInput(f"{export.source}: the run recorded no image digest, so it cannot be reproduced by digest.")
    spec = copy.deepcopy(profile.spec)
    spec["image"] = str(ImageRef.parse(spec["image"]).with_digest(digest))
    spec["unpinned"] = False
    return with_overrides(
        Profile(engine=profile.engine, name=profile.name, spec=spec, source=None), gpus=gpus, port=port
    )


@dataclass(frozen=True)
class ReproduceRequest:
    source: str
    gpus: list[str] | None = None
    port: int | None = None
    cache_dir: str | None = None
    force: bool = False
    owner: str | None = None
    timeout: float = 900.0
    bind: str | None = None  # the export's bind address is only a suggestion: a non-loopback one needs --bind
    replace: bool = False
    host: HostEntry = LOCAL_HOST  # where the setup is rebuilt (any host: the export says where it ran)
    fetch: bool = True  # the model into this host's cache first (up's --no-fetch)
    copy_image: bool = False  # up's --copy-image


def checked_source(
    lab: Lab, runs: Runs, request: ReproduceRequest, say: Any
) -> tuple[Export, Profile, Verification, Profile]:
    """The export (or run) believed and its setup pinned by digest, or refused before anything starts."""
    from labctl.host.docker import daemon as dk

    check_seconds("--timeout", request.timeout)
    export = load_source(runs, request.source)
    profile = recorded_profile(lab, export)
    check = verify(lab, export, profile)
    if check.broken:
        detail = "; ".join(check.broken + check.problems) + (f"\n{check.diff}" if check.diff else "")
        raise BadInput(
            f"{export.source} cannot be believed: {detail}\nNothing was started. --allow-render-drift does not "
            "excuse a broken or edited file. Ask for a fresh `labctl export`."
        )
    if check.problems:
        detail = "; ".join(check.problems) + (f"\n{check.diff}" if check.diff else "")
        if not request.force:
            raise BadInput(
                f"{export.source} does not reproduce as recorded: {detail}\n"
                "Nothing was started. Pass --allow-render-drift to run the setup as it now renders (recorded)."
            )
        say(f"warning (--allow-render-drift): {detail}")
    local_id = None
    if not export.setup["image"].get("digest") and not request.host.is_remote:
        facts = dk.image_facts(str(export.setup["image"].get("reference")))
        local_id = facts.image_id if facts else None
    placed = pinned_for_reproduction(export, profile, request.gpus, request.port, local_id)
    recorded_bind = str(export.host.get("bind") or "127.0.0.1")
    if request.bind is None and recorded_bind not in ("127.0.0.1", "::1", "localhost"):
        say(
            f"note: the original bound {recorded_bind}; this run binds 127.0.0.1 (pass --bind {recorded_bind} to "
            "serve beyond loopback)"
        )
    placed = with_overrides(placed, host=check_bind(request.bind) or "127.0.0.1")
    return export, profile, check, placed


def reproduction(export: Export, record: Record, forced: bool) -> Reproduction:
    return Reproduction(
        source=export.source,
        original_run_id=export.run_id,
        original_host=export.host.get("host"),
        original_host_entry=export.host.get("host_entry"),
        original_docker_host_id=export.host.get("docker_host_id"),
        compose_sha256_matches=record.setup.get("compose_sha256") == export.setup["compose_sha256"],
        forced=forced,
    )


def reproduce(lab: Lab, runs: Runs, request: ReproduceRequest, say: Any, progress: Any = None) -> Record:
    from labctl.host.docker import daemon as dk
    from labctl.run.lifecycle.up import up
    from labctl.run.lifecycle.up_plan import UpRequest, plan_up

    export, profile, check, placed = checked_source(lab, runs, request, say)
    resident = (export.doc.get("record") or {}).get("resident") if isinstance(export.doc.get("record"), dict) else None
    up_request = UpRequest(
        engine=profile.engine.name,
        profile=profile.name,
        timeout=request.timeout,
        owner=request.owner,
        cache_dir=request.cache_dir,
        allow_unsupported=bool(export.setup.get("allow_unsupported")),
        reproduced_from=export.run_id,
        profile_override=placed,
        replace=request.replace,
        fetch=request.fetch,
        resident=bool(resident),
        bind=request.bind if resident else None,
        keys=int(resident.get("keys") or 1) if isinstance(resident, dict) and resident.get("keys") else None,
        allow_no_auth=bool(isinstance(resident, dict) and resident.get("allow_no_auth")),
        host=request.host,
        copy_image=request.copy_image,
        allow_unpinned=not placed.pinned,  # a local image, checked above against the recorded id
    )
    plan_up(lab, up_request)  # the new run's own flags (--owner, --cache-dir, …) are refused before Docker is asked
    dk.check_docker()  # up pulls the recorded digest (with progress, after the disk check) and refuses if it cannot
    record = up(lab, runs, up_request, say, progress)
    record = runs.update(record.run_id, reproduction=reproduction(export, record, bool(check.problems)))
    assert record.reproduction is not None
    if not record.reproduction.compose_sha256_matches:
        say(
            f"warning: the reproduced setup's compose hash {record.setup.get('compose_sha256')} differs from the "
            f"original's {export.setup['compose_sha256']}"
        )
    original = ((export.doc.get("record") or {}).get("engine_setup") or {}).get("model_commit")
    now_commit = record.engine_setup.model_commit if record.engine_setup else None
    if isinstance(original, str) and now_commit and original != now_commit:
        text = (
            f"the model's revision {placed.model.revision!r} now names commit {now_commit}; the original "
            f"ran {original}: the weights may differ"
        )
        say(f"warning: {text}")
        runs.event(record.run_id, "warning", text=text)
    return record
