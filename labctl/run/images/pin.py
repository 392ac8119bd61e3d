"""labctl pin: ask the image's registry what its tag means now, for the target host's platform, and write that
digest into the profile, keeping the rest of the file (comments, order) as it is; and ask the Hub which commit
the model's revision names now. Nothing is pulled or downloaded: only manifests and the Hub's repository info
are read, so pinning a 20 GB engine image takes a second.

The model's revision stays as the profile writes it: a study fixes its model series by that name (the shipped
ones by `main`), and every run records the commit it fetched. `plan_pin` asks and writes nothing (so `up` can
show what pinning resolves before it asks whether to); `write_pin` edits the profile file of the lab it is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from labctl.catalog.image import ImageRef
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile, check_profile_spec, load_profile
from labctl.catalog.sourcefile import parse_yaml_mapping
from labctl.errors import BadInput
from labctl.host.docker import daemon as dk
from labctl.host.files.atomic import write_atomically
from labctl.host.files.disk import size_text
from labctl.host.hub import revisions as hub
from labctl.host.hub.cache import COMMIT
from labctl.host.images import registry

_INDEX_NOTE = re.compile(r"\s*# \S+ image of index sha256:[0-9a-f]{64}")
_VALUE = r"(['\"]?)[^'\"#\s]+\2"


@dataclass(frozen=True)
class Pinned:
    old: str
    new: str
    digest: str
    index_digest: str | None  # the multi-arch index the platform's manifest was chosen from
    platform: str  # the target host's platform
    compressed_bytes: int
    model: str = ""  # the model's repository id
    revision: str = ""  # the model revision as the profile wrote it
    commit: str | None = None  # the commit the revision names now (recorded by each run); None when not asked
    revision_note: str = ""  # why the Hub was not asked


@dataclass(frozen=True)
class PinPlan:
    """What pinning one profile resolves, before anything is written."""

    engine: str
    profile: str
    pinned: Pinned


def plan_pin(lab: Lab, engine: str, name: str) -> PinPlan:
    """Ask the registry (for the target host's platform) and the Hub; write nothing."""
    profile = load_profile(lab, engine, name, allow_unsupported=True)
    source = profile.source
    assert source is not None
    if source.lines.get(("image",)) is None:  # refused before the registry is asked, like every fault of the file
        raise BadInput(f"{source.name}: no top-level 'image:' line to pin.")
    ref = profile.image
    daemon = dk.daemon_facts()  # the target host: its platform, and the registries it treats as insecure
    platform = registry.Platform(daemon.os, daemon.architecture, daemon.variant)
    asked = ImageRef(ref.repository, ref.tag, None) if ref.tag else ref  # a tag decides what "now" means
    found = registry.resolve(asked, platform, daemon.insecure_registries, daemon.insecure_cidrs)
    commit, note = _model_commit(profile)
    pinned = Pinned(
        old=profile.image_text,
        new=str(ref.with_digest(found.digest)),
        digest=found.digest,
        index_digest=found.index_digest,
        platform=str(platform),
        compressed_bytes=found.compressed_bytes,
        model=profile.model.id,
        revision=profile.model.revision,
        commit=commit,
        revision_note=note,
    )
    return PinPlan(engine, name, pinned)


def _model_commit(profile: Profile) -> tuple[str | None, str]:
    """The commit the model's revision names now, or None and why the Hub is not asked."""
    model, engine = profile.model, profile.engine
    if COMMIT.fullmatch(model.revision):
        return None, "already a commit"
    if engine.model_cache is None:
        return None, f"{engine.name} reads no model from the Hub"
    if not engine.pins_revision:
        return None, f"{engine.name} cannot pin a model revision: it serves the Hub's main"
    if model.from_loopback_hub:
        return None, "the lab's loopback Hub serves it: `labctl fetch` resolves it"
    where = f"model.id and model.revision in engines/{engine.name}/profiles/{profile.name}.yaml"
    return hub.resolve_commit(model.id, model.revision, where), ""


def write_pin(lab: Lab, plan: PinPlan) -> Pinned:
    """Write the image digest `plan` resolved into the profile of `lab` (which must still name the same image and
    model revision)."""
    pinned = plan.pinned
    profile = load_profile(lab, plan.engine, plan.profile, allow_unsupported=True)
    source = profile.source
    assert source is not None
    if (profile.image_text, profile.model.id, profile.model.revision) != (pinned.old, pinned.model, pinned.revision):
        raise BadInput(
            f"{source.name} names {profile.image_text} and {profile.model.id}@{profile.model.revision}, not what was "
            f"resolved ({pinned.old}, {pinned.model}@{pinned.revision}): nothing was written. Run `labctl pin "
            f"{plan.engine} --profile {plan.profile}` there."
        )
    image_line = source.lines.get(("image",))
    if image_line is None:
        raise BadInput(f"{source.name}: no top-level 'image:' line to pin.")
    note = f"  # {pinned.platform} image of index {pinned.index_digest}" if pinned.index_digest else ""
    lines = source.path.read_text(encoding="utf-8").splitlines(keepends=True)
    line = _INDEX_NOTE.sub("", lines[image_line - 1], count=1)
    lines[image_line - 1] = re.sub(rf"^(image:\s*){_VALUE}", lambda m: m.group(1) + pinned.new + note, line, count=1)
    unpinned_line = source.lines.get(("unpinned",))
    if unpinned_line is not None:
        del lines[unpinned_line - 1]
    text = "".join(lines)
    edited = parse_yaml_mapping(text, source.path, source.name)
    check_profile_spec(profile.engine, edited, edited.data)  # the pinned profile must be valid before it is written
    write_atomically(source.path, text)
    return pinned


def pin_profile(lab: Lab, engine: str, name: str) -> Pinned:
    return write_pin(lab, plan_pin(lab, engine, name))


def pin_lines(plan: PinPlan) -> list[str]:
    """What pinning resolves, one line per fact, for people."""
    p = plan.pinned
    where = f" from index {p.index_digest}" if p.index_digest else ""
    model = (
        f"  model  {p.model}@{p.revision} -> commit {p.commit} now (the profile keeps {p.revision}; each run "
        "records the commit it fetched)"
        if p.commit is not None
        else f"  model  {p.model}@{p.revision} ({p.revision_note})"
    )
    size = f"{p.platform} image{where}, {size_text(p.compressed_bytes)} compressed (not pulled)"
    return [f"  image  {p.old} -> {p.new}", f"         {size}", model]


def pin_command(lab: Lab, engine: str, name: str, new_lab: str) -> str:
    """The one command line that pins a profile: in a lab of one's own, made first when `lab` is the shipped one."""
    pin = f"labctl pin {engine} --profile {name}"
    return f"labctl init {new_lab} && {pin}" if lab.packaged else pin
