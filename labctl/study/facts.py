"""What a study asks its hosts before it spends GPU time: their GPUs, their cached images, and which
commit a model revision names in the cache. Each question drives one host of `labctl hosts`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from labctl.catalog.clusters_file import ClusterEntry
from labctl.catalog.hosts_file import HostEntry
from labctl.catalog.profiles import Profile
from labctl.compose.options import default_cache_dir
from labctl.host.docker import daemon as dk
from labctl.host.gpus.inventory import Gpu, list_gpus
from labctl.host.remote.hosts import activate

_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class HostFacts:
    entry: HostEntry
    gpus: tuple[Gpu, ...]
    problem: str | None = None  # the host did not answer
    cluster: ClusterEntry | None = None  # a Slurm cluster: `entry` is one of its nodes, `gpus` all of theirs

    @property
    def gpu_text(self) -> str:
        """GPU model and driver, the part of a fingerprint that says what the host is."""
        if not self.gpus:
            return "none"
        names = sorted({f"{g.name} (driver {g.driver})" for g in self.gpus})
        if self.cluster is not None:  # Slurm picks the node: its models count, not how many one node has
            return f"Slurm cluster {self.cluster.name}: " + ", ".join(names)
        return f"{len(self.gpus)}x " + ", ".join(names)

    @property
    def gpu_model(self) -> str:
        return ", ".join(sorted({g.name for g in self.gpus})) or "none"

    @property
    def accelerator(self) -> str:
        return "simulated" if self.entry.simulated else ("gpu" if self.gpus else "cpu")


def host_facts(entry: HostEntry) -> HostFacts:
    activate(entry)
    try:
        return HostFacts(entry, tuple(list_gpus()))
    except Exception as exc:  # noqa: BLE001 - a host that cannot answer is a finding of the plan, not a crash
        return HostFacts(entry, (), f"{type(exc).__name__}: {exc}")


def cluster_facts(cluster: ClusterEntry) -> HostFacts:
    """A cluster's GPUs, read from each node's nvidia-smi; the first node stands for the image cache."""
    if not cluster.nodes:
        return HostFacts(HostEntry(cluster.name, "local"), (), f"cluster {cluster.name} lists no nodes", cluster)
    first = cluster.nodes[sorted(cluster.nodes)[0]]
    try:
        gpus = [g for name in sorted(cluster.nodes) for g in list_gpus(cluster.nodes[name].nvidia_smi_argv())]
    except Exception as exc:  # noqa: BLE001 - a node that cannot answer is a finding of the plan, not a crash
        return HostFacts(first, (), f"{type(exc).__name__}: {exc}", cluster)
    activate(first)
    return HostFacts(first, tuple(gpus), None, cluster)


def image_identity(profile: Profile) -> tuple[str, bool]:
    """(the image's identity, whether the driven host has it): the pinned digest, else the local image id."""
    if profile.image_digest:
        facts = _facts(profile.image_text)
        return profile.image_digest, facts is not None
    facts = _facts(profile.image_text)
    if facts is None:
        return f"unpinned {profile.image_text} (not on the host yet)", False
    return facts.image_id, True


def _facts(reference: str) -> dk.ImageFacts | None:
    try:
        return dk.image_facts(reference)
    except Exception:  # noqa: BLE001 - an unreachable daemon: the image counts as not cached
        return None


def revision_commit(profile: Profile, cache_dir: str | None = None) -> str:
    """The commit a model revision names: itself when it is one, else the branch's ref in the cache."""
    model = profile.model
    if _COMMIT.fullmatch(model.revision):
        return model.revision
    root = Path(cache_dir or default_cache_dir())
    hub = root / "hub" if (root / "hub").is_dir() else root
    ref = hub / ("models--" + model.id.replace("/", "--")) / "refs" / model.revision
    try:
        text = ref.read_text(encoding="ascii").strip() if ref.is_file() else ""
    except (OSError, UnicodeDecodeError):
        text = ""
    return text if _COMMIT.fullmatch(text) else f"{model.revision} (unresolved)"


def model_cached(profile: Profile, cache_dir: str | None = None) -> bool:
    from labctl.catalog.memory import find_config

    try:
        return find_config(Path(cache_dir or default_cache_dir()), profile.model.id, profile.model.revision) is not None
    except ValueError:
        return False
