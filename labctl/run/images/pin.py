"""labctl pin: ask the image's registry what its tag means now, for the target host's platform, and write
that digest into the profile, keeping the rest of the file (comments, order) as it is. Nothing is pulled:
only manifests are read, so pinning a 20 GB engine image takes a second."""

from __future__ import annotations

import re
from dataclasses import dataclass

from labctl.catalog.image import ImageRef
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import check_profile_spec, load_profile
from labctl.catalog.sourcefile import parse_yaml_mapping
from labctl.errors import BadInput
from labctl.host.docker import daemon as dk
from labctl.host.files.atomic import write_atomically
from labctl.host.images import registry

_INDEX_NOTE = re.compile(r"\s*# \S+ image of index sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Pinned:
    old: str
    new: str
    digest: str
    index_digest: str | None  # the multi-arch index the platform's manifest was chosen from
    platform: str  # the target host's platform
    compressed_bytes: int


def pin_profile(lab: Lab, engine: str, name: str) -> Pinned:
    profile = load_profile(lab, engine, name, allow_unsupported=True)
    source = profile.source
    assert source is not None
    image = profile.image_text
    ref = profile.image
    image_line = source.lines.get(("image",))
    if image_line is None:  # refused before the registry is asked, like every fault of the file itself
        raise BadInput(f"{source.name}: no top-level 'image:' line to pin.")
    daemon = dk.daemon_facts()  # the target host: its platform, and the registries it treats as insecure
    platform = registry.Platform(daemon.os, daemon.architecture, daemon.variant)
    asked = ImageRef(ref.repository, ref.tag, None) if ref.tag else ref  # a tag decides what "now" means
    found = registry.resolve(asked, platform, daemon.insecure_registries, daemon.insecure_cidrs)
    pinned = str(ref.with_digest(found.digest))
    note = f"  # {found.platform} image of index {found.index_digest}" if found.index_digest else ""
    lines = source.path.read_text(encoding="utf-8").splitlines(keepends=True)
    index = image_line - 1
    line = _INDEX_NOTE.sub("", lines[index], count=1)
    line = re.sub(r"^(image:\s*)(['\"]?)[^'\"#\s]+\2", lambda m: m.group(1) + pinned + note, line, count=1)
    lines[index] = line
    unpinned_line = source.lines.get(("unpinned",))
    if unpinned_line is not None:
        del lines[unpinned_line - 1]
    text = "".join(lines)
    edited = parse_yaml_mapping(text, source.path, source.name)
    check_profile_spec(profile.engine, edited, edited.data)  # the pinned profile must be valid before it is written
    write_atomically(source.path, text)
    return Pinned(image, pinned, found.digest, found.index_digest, str(platform), found.compressed_bytes)
