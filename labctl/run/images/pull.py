"""Getting a profile's image onto the Docker host for `up`: the disk check against the image's compressed size
(from its registry's manifest), the pull by digest with progress, and the `image_pull` prep part."""

from __future__ import annotations

from collections.abc import Callable

from labctl.catalog.image import ImageRef
from labctl.catalog.profiles import Profile
from labctl.errors import LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.docker import engine_api
from labctl.host.files.disk import GIB, check_room, size_text
from labctl.host.images import registry
from labctl.host.images.pull_stream import PullProgress, pull_image
from labctl.run.records.prep import PrepPart

Say = Callable[[str], None]
PLAIN_PROGRESS_EVERY_S = 5.0  # progress lines in logs and CI: often enough to see it move, rarely enough to read


def pull_for_up(profile: Profile, remote: bool, reproducing: bool, say: Say, live: Say | None) -> PrepPart:
    """Pull by digest (by tag when unpinned) after checking Docker's disk has room for the layers. `live` shows
    a terminal's status line; without one, progress is a plain line every few seconds."""
    ref = profile.image
    wanted = ref.by_digest if ref.pinned else ref.tagged
    daemon = dk.daemon_facts()
    found, checked = image_layers(ref, daemon, say), ""
    size = found.compressed_bytes if found else None
    if size is not None:
        on_this_machine = not remote and engine_api.daemon_socket() is not None  # tcp:// and ssh:// are elsewhere
        free = check_room(size, daemon.root_dir, f"pulling {wanted}") if on_this_machine else None
        checked = f"{free / GIB:.1f} GiB free at {daemon.root_dir}" if free is not None else "disk not checked"
    how = " by digest" if ref.pinned else " by tag (unpinned)"
    say(f"pulling {wanted}{how}" + (f" ({size_text(size)} compressed, {checked})" if size is not None else ""))
    last = [0.0]

    def report(progress: PullProgress) -> None:
        if live is not None:
            live(pull_line(wanted, progress))
        elif progress.seconds - last[0] >= PLAIN_PROGRESS_EVERY_S:
            last[0] = progress.seconds
            say(pull_line(wanted, progress))

    layers = dict(found.layers) if found else {}
    try:
        pulled = pull_image(ref.repository, ref.digest or ref.tag or "latest", layers, report)
    except LabctlError as exc:
        if not reproducing:
            raise
        raise LabctlError(
            f"the recorded image digest cannot be had: {exc}. Nothing was started. Push that exact "
            "image to its registry (or load it), then try again."
        ) from None
    if live is not None:
        live("")
    if pulled.bytes is None:
        say(f"pulled {wanted} in {pulled.seconds:.1f} s")
        detail = f"pulled {wanted} through the docker CLI (its registry login, or an ssh:// host): no byte counts"
    else:
        say(pull_line(wanted, PullProgress(pulled.bytes, None, pulled.seconds), finished=True))
        detail = f"pulled {wanted}: {pulled.layers} layers, {pulled.layers_present} already present"
    return PrepPart(seconds=pulled.seconds, bytes=pulled.bytes, cached=False, detail=detail)


def image_layers(ref: ImageRef, daemon: dk.DaemonFacts, say: Say) -> registry.Resolved | None:
    """The layers (and compressed size) of the image this host would pull, from its registry; None (said) when
    the registry cannot tell, in which case the pull itself goes ahead and reports what is wrong."""
    platform = registry.Platform(daemon.os, daemon.architecture, daemon.variant)
    try:
        return registry.resolve(ref, platform, daemon.insecure_registries, daemon.insecure_cidrs)
    except LabctlError as exc:
        say(f"warning: the image's size is unknown, so disk space was not checked: {exc}")
        return None


def pull_line(what: str, progress: PullProgress, finished: bool = False) -> str:
    rate = f"{size_text(progress.rate)}/s"
    if finished:
        return f"pulled {what}: {size_text(progress.done)} in {progress.seconds:.1f} s ({rate})"
    done = size_text(progress.done) + (f"/{size_text(progress.total)}" if progress.total else "")
    eta = f", ETA {progress.eta:.0f} s" if progress.eta is not None else ""
    return f"pulling {what}: {done}, {rate}{eta}"
