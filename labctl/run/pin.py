"""labctl pin: resolve a profile's tag to the registry digest and write it into the file, keeping
the rest of the file (comments, order) as it is."""

from __future__ import annotations

import re

from labctl.catalog.image import digests_of
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.errors import BadInput, LabctlError
from labctl.host import docker as dk
from labctl.host.files import write_atomically


def pin_profile(lab: Lab, engine: str, name: str) -> tuple[str, str]:
    """Returns (old image, new pinned image)."""
    profile = load_profile(lab, engine, name, allow_unsupported=True)
    source = profile.source
    assert source is not None
    image: str = profile.spec["image"]
    ref = profile.image
    tag_ref = ref.tagged
    dk.check_docker()
    facts = dk.pull(tag_ref, quiet=True)  # asks the registry what the tag means now
    repo = ref.repository
    digests = digests_of(facts.repo_digests, repo)
    if not digests:
        raise LabctlError(
            f"{tag_ref} has no registry digest for {repo} (RepoDigests: {facts.repo_digests}); "
            "push it to its registry first."
        )
    pinned = str(ref.with_digest(digests[0]))
    lines = source.path.read_text(encoding="utf-8").splitlines(keepends=True)
    image_line = source.lines.get(("image",))
    if image_line is None:
        raise BadInput(f"{source.name}: no top-level 'image:' line to pin.")
    index = image_line - 1
    lines[index] = re.sub(r"^(image:\s*)(['\"]?)[^'\"#\s]+\2", lambda m: m.group(1) + pinned, lines[index], count=1)
    unpinned_line = source.lines.get(("unpinned",))
    if unpinned_line is not None:
        del lines[unpinned_line - 1]
    write_atomically(source.path, "".join(lines))
    load_profile(lab, engine, name, allow_unsupported=True)  # the result must still be a valid profile
    return image, pinned
