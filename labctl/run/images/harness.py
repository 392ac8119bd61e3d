"""The harness engine's image, which labctl builds itself: labctl's own modules the image runs (the harness
engine, the bench client) from the labctl that builds it, PyYAML's pure-Python modules (the base image has no
pip), and the lab's engines/harness/Dockerfile, staged into a context of their own. `up` builds it when an
unpinned harness profile's image is missing from this machine's Docker; `make harness-image` (through
`python -m labctl.run.images.harness`) builds the checkout's. It is pushed when its registry answers, so that
the run records the registry's digest; otherwise the local image runs, recorded by its id and without one."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

import labctl
from labctl.catalog.hosts_file import LOCAL, HostEntry
from labctl.catalog.image import ImageRef, digests_of
from labctl.catalog.lab import Lab, shipped_lab
from labctl.catalog.profiles import Profile
from labctl.errors import LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.images import registry
from labctl.host.images.build import build_image, push_image, registry_answers
from labctl.run.records.prep import PrepPart

Say = Callable[[str], None]
# What the image runs, relative to the labctl package: the harness engine, the bench client and what they import.
IMAGE_MODULES = (
    "__init__.py",
    "errors.py",
    "harness/*.py",
    "bench/*.py",
    "catalog/__init__.py",
    "catalog/contracts.py",  # the personas (the persona image builds on this one)
    "catalog/fields.py",
    "catalog/hub_names.py",
    "catalog/lab.py",
    "catalog/limits.py",
    "catalog/sourcefile.py",
    "catalog/user_folders.py",
    "host/__init__.py",
    "host/identity.py",
    "host/hub/__init__.py",
    "host/hub/cache.py",
    "host/hub/fetch_job.py",
    "host/remote/__init__.py",
    "host/remote/client_processes.py",  # a sharded level's workers, started by the client on the host
    "host/remote/lifeline.py",
)
BASES = ("python:3.12-slim", "labctl/base:bookworm")  # the first one present locally; else Docker pulls the first
NO_DIGEST = "run by image id, no registry digest"
FIXED_TIME = 946684800  # 2000-01-01: file contents, not copy times, decide the legacy builder's cache and layers


@dataclass(frozen=True)
class HarnessImage:
    reference: str
    image_id: str
    base: str
    seconds: float
    digest: str | None  # the registry's digest of what was pushed; never made up when nothing was
    pushed: str  # where it went, or why it did not

    def how(self, dockerfile: Path) -> str:
        where = f"built by labctl {labctl.__version__} from {dockerfile} on {self.base} in {self.seconds:.1f} s"
        return f"{where}; {self.pushed}"


def dockerfile_to_build(lab: Lab, profile: Profile, host: HostEntry) -> Path | None:
    """The Dockerfile `up` builds a missing image from: the harness engine's, for an unpinned profile on this
    machine's Docker. A pinned profile is pulled by its digest; another host pulls (or gets a copy)."""
    if profile.engine.name != "harness" or profile.image.pinned or host.docker != LOCAL:
        return None
    path = lab.engine_dir("harness") / "Dockerfile"
    return lab.inside(path) if path.is_file() else None


def stage_context(folder: Path, dockerfile: Path) -> None:
    """The build context: labctl/ (IMAGE_MODULES), image-site/yaml/ and the Dockerfile, with fixed times."""
    package = Path(labctl.__file__).resolve().parent
    for pattern in IMAGE_MODULES:
        for path in sorted(package.glob(pattern)):
            target = folder / "labctl" / path.relative_to(package)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    site = folder / "image-site" / "yaml"
    site.mkdir(parents=True)
    for path in sorted(Path(yaml.__file__).resolve().parent.glob("*.py")):
        shutil.copyfile(path, site / path.name)
    shutil.copyfile(dockerfile, folder / "Dockerfile")
    for path in [*folder.rglob("*"), folder]:
        os.utime(path, (FIXED_TIME, FIXED_TIME))


def base_image() -> str:
    """$LABCTL_HARNESS_BASE, else the first of BASES this Docker has (make docker-lab makes the offline one)."""
    chosen = os.environ.get("LABCTL_HARNESS_BASE")
    if chosen:
        return str(ImageRef.parse_or_refuse(chosen, "LABCTL_HARNESS_BASE"))
    return next((base for base in BASES if dk.image_facts(base) is not None), BASES[0])


def build_harness_image(dockerfile: Path, reference: str, say: Say, live: Say | None) -> HarnessImage:
    ref = ImageRef.parse_or_refuse(reference, "the harness image")
    base = base_image()
    say(f"building {reference} from {dockerfile} on {base} (the harness image is labctl's own)")

    def step(line: str) -> None:
        (live or say)(f"building {reference}: {line}")

    with tempfile.TemporaryDirectory(prefix="labctl-harness-") as folder:
        stage_context(Path(folder), dockerfile)
        built = build_image(Path(folder), reference, {"BASE": base}, step)
    if live is not None:
        live("")
    daemon = dk.daemon_facts()
    digest, pushed = push_if_possible(ref, daemon, say)
    facts = dk.image_facts(reference)
    if facts is None or facts.image_id != built.image_id:
        raise LabctlError(f"built {reference} as {built.image_id}, but Docker now lists {facts and facts.image_id}")
    if digest is not None and digest not in digests_of(facts.repo_digests, ref.repository):
        digest, pushed = None, f"pushed, but the registry's tag now names another image: {NO_DIGEST}"
    say(f"built {reference} in {built.seconds:.1f} s: " + (f"digest {digest}" if digest else "no digest"))
    return HarnessImage(reference, built.image_id, base, built.seconds, digest, pushed)


def push_if_possible(ref: ImageRef, daemon: dk.DaemonFacts, say: Say) -> tuple[str | None, str]:
    """Push to the lab registry the reference names, when it answers: (the digest its tag names now, what
    happened). A push that fails leaves the local image to run, said and recorded."""
    api = registry_answers(ref, daemon)
    if api is None:
        return None, f"not pushed (no lab registry answers for it): {NO_DIGEST}"
    say(f"pushing {ref} to {api}")
    try:
        push_image(str(ref))
    except LabctlError as exc:
        say(f"warning: {exc}; the local image runs")
        return None, f"not pushed ({str(exc)[:200]}): {NO_DIGEST}"
    try:
        digest = pushed_digest(ref, daemon)
    except LabctlError as exc:
        return None, f"pushed to {api}, but its digest could not be read ({str(exc)[:200]}): {NO_DIGEST}"
    return digest, f"pushed to {api} as {digest}"


def pushed_digest(ref: ImageRef, daemon: dk.DaemonFacts) -> str:
    """What the registry's tag names now: the digest Docker would pull for this platform."""
    platform = registry.Platform(daemon.os, daemon.architecture, daemon.variant)
    tagged = ImageRef(ref.repository, ref.tag or "latest")
    return registry.resolve(tagged, platform, daemon.insecure_registries, daemon.insecure_cidrs).digest


def build_for_up(dockerfile: Path, reference: str, say: Say, live: Say | None) -> tuple[HarnessImage, PrepPart]:
    image = build_harness_image(dockerfile, reference, say, live)
    return image, PrepPart(seconds=image.seconds, cached=False, detail=image.how(dockerfile))


def main(argv: list[str]) -> int:
    """`make harness-image`: build the checkout's harness image as REFERENCE and push it (the tests pin it)."""
    if len(argv) != 1:
        print("usage: python -m labctl.run.images.harness REFERENCE", file=sys.stderr)
        return 2
    lab, _ = shipped_lab()
    if lab is None:
        print("harness-image: error: this labctl has no lab to build from", file=sys.stderr)
        return 1

    def say(text: str) -> None:
        print(f"harness-image: {text}", flush=True)

    try:
        image = build_harness_image(lab / "engines" / "harness" / "Dockerfile", argv[0], say, None)
        if image.digest is None:
            raise LabctlError(f"{argv[0]} was built but not pushed: no registry answers for it (run make docker-lab)")
    except LabctlError as exc:
        print(f"harness-image: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
