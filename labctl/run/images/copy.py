"""`up --host NAME --copy-image`: for a host that cannot reach the image's registry, the pinned image goes from
the controller's Docker Engine to the host's over Docker's own transport (save | load), and is checked on
arrival. Docker's image id is the digest of the image's config, which names every layer's content, so a
loaded image whose id is the one the pinned manifest names is the pinned image, byte for byte.

Docker Engine 20.10 drops repo digests on `docker load`, so on that host the image is run by its id (the
record keeps the pinned reference and says how the image arrived) and tagged `REPO:labctl-copy-<hex>` so that
an image prune does not take it away as dangling."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from labctl.catalog.hosts_file import LOCAL_HOST, HostEntry
from labctl.catalog.image import ImageRef, digests_of
from labctl.catalog.profiles import Profile
from labctl.errors import BadInput, LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.files.disk import size_text
from labctl.host.images import registry
from labctl.host.images.transfer import copy_image
from labctl.host.remote.hosts import endpoint_url
from labctl.run.images.pull import PLAIN_PROGRESS_EVERY_S
from labctl.run.records.prep import PrepPart

Say = Callable[[str], None]


@dataclass(frozen=True)
class Arrived:
    image_id: str  # what the host runs: the id, since its Docker has no repo digest for a loaded image
    user: str
    part: PrepPart
    verified: str  # how the id was tied to the pinned digest
    pulled_here: str = ""  # the controller's daemon id, when labctl had to pull the image there first


def copy_tag(ref: ImageRef) -> str:
    assert ref.digest is not None
    return f"{ref.repository}:labctl-copy-{ref.digest.removeprefix('sha256:')}"


def check_copy_request(profile: Profile, host: HostEntry) -> None:
    if not host.is_remote:
        raise BadInput(
            f"--copy-image copies to a remote host, and {host.name} is this machine's Docker: add --host NAME "
            "(a host reached over ssh://)."
        )
    ref = profile.image
    if not ref.pinned or ref.digest is None:
        raise BadInput(
            f"--copy-image moves an image by digest, and {profile.engine.name}/{profile.name} uses {ref} (not "
            f"pinned). Pin it first: labctl pin {profile.engine.name} --profile {profile.name}."
        )


def copy_to_host(profile: Profile, host: HostEntry, say: Say, live: Say | None) -> Arrived:
    """Make the profile's pinned image present on `host` (the active Docker endpoint) by copying it from the
    controller's Docker Engine, unless it is there already."""
    check_copy_request(profile, host)
    ref = profile.image
    assert ref.digest is not None
    controller = endpoint_url(LOCAL_HOST)
    target = dk.daemon_facts()
    image_id, verified, pulled_here = controller_image(
        ref, controller, registry.Platform(target.os, target.architecture, target.variant), say
    )
    present = dk.image_facts(image_id)
    if present is not None:
        _tag(present.image_id, ref)
        say(f"{ref.by_digest} is on {host.name} already (image {image_id[:19]}, copied before)")
        part = PrepPart(seconds=0.0, bytes=0, cached=True, detail=f"already on {host.name} as image {image_id}")
        return Arrived(present.image_id, present.user, part, verified, pulled_here)
    say(f"copying {ref.by_digest} from this controller to {host.name} (docker save | docker load over {host.docker})")
    last = [0.0]

    def report(sent: int, seconds: float) -> None:
        line = f"copying {ref.repository}: {size_text(sent)}, {size_text(sent / seconds if seconds else 0)}/s"
        if live is not None:
            live(line)
        elif seconds - last[0] >= PLAIN_PROGRESS_EVERY_S:
            last[0] = seconds
            say(line)

    copied = copy_image(controller, host.docker, ref.by_digest, report)
    if live is not None:
        live("")
    arrived = dk.image_facts(image_id)
    if arrived is None or arrived.image_id != image_id:
        raise LabctlError(
            f"copied {ref.by_digest} to {host.name}, but its Docker loaded {', '.join(copied.loaded) or 'nothing'}, "
            f"not image {image_id} (the pinned one). Nothing was started; remove what was loaded there."
        )
    _tag(image_id, ref)
    rate = size_text(copied.bytes / copied.seconds if copied.seconds else 0)
    say(f"copied {ref.by_digest} to {host.name}: {size_text(copied.bytes)} in {copied.seconds:.1f} s ({rate}/s)")
    part = PrepPart(
        seconds=copied.seconds,
        bytes=copied.bytes,
        cached=False,
        detail=f"copied from the controller (docker save | docker load over {host.docker}); {verified}",
    )
    return Arrived(image_id, arrived.user, part, verified, pulled_here)


def controller_image(ref: ImageRef, controller: str, platform: registry.Platform, say: Say) -> tuple[str, str, str]:
    """The pinned image's id on the controller (pulled there first when missing), how it is known to be the
    pinned one (the registry's manifest for that digest names its config, else the controller's Docker
    recorded the digest when it pulled the image), and the controller daemon's id when this pull brought a
    new image there ('' otherwise)."""
    pulled_here = ""
    with dk.on_endpoint(controller):
        daemon = dk.daemon_facts()
        facts = dk.image_facts(ref.by_digest)
        if facts is None:
            say(f"{ref.by_digest} is not on this controller: pulling it here first")
            before = dk.image_ids()
            with dk.docker_errors(f"pulling {ref.by_digest} on this controller"):
                facts = dk.pull(ref.by_digest, quiet=True)
            pulled_here = "" if facts.image_id in before else daemon.id or "unknown"
    if ref.digest not in digests_of(facts.repo_digests, ref.repository):
        raise LabctlError(
            f"this controller's image for {ref.by_digest} carries the digests {list(facts.repo_digests)}, not "
            f"{ref.digest}; refusing to copy it."
        )
    try:
        resolved = registry.resolve(ref, platform, daemon.insecure_registries, daemon.insecure_cidrs)
    except LabctlError as exc:
        say(f"note: the registry cannot confirm the digest now, so this controller's Docker is trusted: {exc}")
        return (
            facts.image_id,
            "image id checked against this controller's Docker, which verified the digest on pull",
            pulled_here,
        )
    if resolved.config_digest != facts.image_id:
        raise LabctlError(
            f"the registry says {ref.by_digest} has config {resolved.config_digest}, but this controller's image "
            f"is {facts.image_id}; refusing to copy it. Remove the local image and pull it again."
        )
    return facts.image_id, "image id checked against the registry's manifest for the pinned digest", pulled_here


def _tag(image_id: str, ref: ImageRef) -> None:
    with dk.docker_errors(f"tagging {image_id[:19]}"):
        dk.client().image.tag(image_id, copy_tag(ref))
