"""Checks made before anything starts: Docker and Compose answer, GPUs exist and are free, the port
is free. Who holds a GPU is read from the running containers' labels, never from a state file."""

from __future__ import annotations

from dataclasses import dataclass

from labctl.catalog.fit import Target, fit
from labctl.catalog.profiles import Profile
from labctl.compose.labels import RunLabels
from labctl.errors import BadInput, Conflict, LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.gpus import inventory as gpus_mod
from labctl.run.records.record import Fit


@dataclass(frozen=True)
class Holder:
    run_id: str
    engine: str
    profile: str
    owner: str
    since: str
    gpus: list[str]
    port: str
    host: str
    resident: bool

    def describe(self) -> str:
        return (
            f"{self.engine}/{self.profile} (run {self.run_id}, owner {self.owner}, since {self.since}"
            f"{', resident' if self.resident else ''})"
        )


@dataclass(frozen=True)
class GpuHost:
    found: list[gpus_mod.Gpu]
    # No nvidia runtime and no CDI spec: Docker may still have the legacy `nvidia` device driver that it
    # registers when the NVIDIA hook is on the daemon's PATH. Only starting a container with a device
    # request tells; `up` does so once the image is here.
    needs_device_probe: bool = False

    @property
    def simulated(self) -> bool:
        return any(g.simulated for g in self.found)


def check_gpu_host(profile: Profile) -> GpuHost:
    """On a host without NVIDIA GPUs, say exactly what is missing, before Docker is asked anything."""
    engine = profile.engine
    if not engine.needs_gpu:
        return GpuHost([])
    problems = []
    try:
        runtimes = dk.runtimes()
    except LabctlError:
        runtimes = []
    no_runtime = "nvidia" not in runtimes and not gpus_mod.cdi_specs()
    runtime_problem = (
        f"Docker has no NVIDIA runtime (runtimes: {', '.join(runtimes) or 'none'}) and no NVIDIA CDI spec "
        "in /etc/cdi or /var/run/cdi: install the NVIDIA Container Toolkit"
    )
    found = gpus_mod.list_gpus()
    if gpus_mod.nvidia_smi() is None or not found:
        problems += [runtime_problem] if no_runtime else []
    if gpus_mod.nvidia_smi() is None:
        problems.append("nvidia-smi was not found: no NVIDIA driver on this host")
    elif not found:
        problems.append("nvidia-smi lists no GPU")
    else:
        known = {g.index for g in found}
        missing = [i for i in profile.gpu_ids if i not in known]
        if missing:
            problems.append(
                f"GPU(s) {', '.join(missing)} do not exist here (nvidia-smi lists {', '.join(sorted(known))})"
            )
        if profile.gpu_count > len(found):
            problems.append(f"the profile needs {profile.gpu_count} GPUs; this host has {len(found)}")
        archs = engine.gpu_archs
        if archs and not any(a.lower() in g.name.lower() for g in found for a in archs):
            problems.append(
                f"{engine.name} runs only on {', '.join(archs)}; this host has {', '.join(sorted({g.name for g in found}))}"
            )
    if problems:
        raise LabctlError(
            f"cannot start {engine.name}/{profile.name} on this host: "
            + "; ".join(problems)
            + ". Nothing was started. "
            "GPU-free alternative: labctl up harness --profile smoke"
        )
    return GpuHost(found, needs_device_probe=no_runtime)


def check_device_request(profile: Profile, host: GpuHost, image: str) -> None:
    """Where neither an nvidia runtime nor a CDI spec exists: one throwaway container with the profile's
    GPU request must start, or the host cannot give GPUs to a container at all."""
    if not host.needs_device_probe:
        return
    ids = profile.gpu_ids or [g.index for g in host.found[: profile.gpu_count]]
    problem = dk.gpu_request_problem(image, ids)
    if problem:
        raise LabctlError(
            f"cannot start {profile.engine.name}/{profile.name} on this host: Docker has no NVIDIA runtime, no "
            f"NVIDIA CDI spec, and a container asking for GPU {','.join(ids)} does not start ({problem}): install "
            "the NVIDIA Container Toolkit. Nothing was started."
        )


def current_holders() -> list[Holder]:
    holders: dict[str, Holder] = {}
    for container in dk.labctl_containers(all_states=False):
        labels = RunLabels.from_labels(dk.labels_of(container))
        if labels.run_id in holders:
            continue
        holders[labels.run_id] = Holder(
            run_id=labels.run_id,
            engine=labels.engine,
            profile=labels.profile,
            owner=labels.owner,
            since=labels.created_at or "?",
            gpus=list(labels.gpus.ids),
            port=labels.port,
            host=labels.host,
            resident=labels.resident,
        )
    return list(holders.values())


def gpu_conflicts(profile: Profile, holders: list[Holder], exclude: str = "") -> list[Holder]:
    wanted = set(profile.gpu_ids)
    return [h for h in holders if h.run_id != exclude and wanted & set(h.gpus)]


def port_conflicts(profile: Profile, holders: list[Holder], exclude: str = "") -> list[Holder]:
    return [h for h in holders if h.run_id != exclude and h.port == str(profile.port)]


def foreign_gpu_processes(profile: Profile, found: list[gpus_mod.Gpu]) -> list[str]:
    if not found:
        return []
    held = gpus_mod.foreign_processes()
    return [f"GPU {g.index}: {p}" for g in found if g.index in profile.gpu_ids for p in held.get(g.uuid, [])]


def refuse(what: str, holders: list[Holder]) -> Conflict:
    lines = [f"{what} is held by " + "; ".join(h.describe() for h in holders) + "."]
    lines.append("Free it with: " + " && ".join(f"labctl down {h.run_id}" for h in holders) + " (or pass --replace).")
    return Conflict(" ".join(lines))


def check_cuda(profile: Profile) -> str | None:
    """The image's CUDA major against the driver's; returns the driver's CUDA version when known."""
    needed = profile.cuda
    if not profile.engine.needs_gpu:
        return None
    have = gpus_mod.cuda_version()
    if needed and have and int(have.split(".")[0]) < needed:
        raise BadInput(
            f"{profile.image_text} needs CUDA {needed}, but this host's driver supports CUDA {have} "
            f"(nvidia-smi). Nothing was started. Upgrade the driver (CUDA 13 needs driver >= 580), or use an image "
            f"built for CUDA {have.split('.')[0]} (for vLLM a -cu129 tag) in another profile."
        )
    return have


def check_memory_fit(
    profile: Profile,
    found: list[gpus_mod.Gpu],
    cache_dir: str | None,
    allow_unfit: bool,
    unified_memory_gib: float | None = None,
) -> Fit | None:
    """Would the model fit in the memory the chosen GPUs have free now? Refuses (exit 2) unless allowed."""
    chosen = [g for g in found if g.index in profile.gpu_ids] or found[: profile.gpu_count]
    if not chosen:
        return None
    unified = any(g.unified_memory for g in chosen)
    if unified:
        memory = unified_memory_gib or gpus_mod.host_memory_available_gib()
    else:
        free = [g.free_gib() for g in chosen]
        memory = min(f for f in free if f is not None) if all(f is not None for f in free) else None
    if memory is None:
        return None
    target = Target(chosen[0].name, memory, unified_memory=unified)
    estimate = fit(profile, target, cache_dir)
    if estimate is None:
        return None
    if not estimate.fits and not allow_unfit:
        detail = "\n".join(
            ["  " + line for line in estimate.lines()] + ["  ways out: " + w for w in estimate.ways_out()]
        )
        raise BadInput(
            f"{profile.engine.name}/{profile.name} does not fit the free memory of GPU(s) "
            f"{','.join(g.index for g in chosen)} ({memory:.1f} GiB each). Nothing was started. Pass --allow-unfit "
            f"to start it anyway (recorded).\n{detail}"
        )
    return Fit(
        fits=estimate.fits,
        allowed_unfit=allow_unfit and not estimate.fits,
        gpu_memory_gib=round(memory, 2),
        unified_memory=unified,
        kv_needed_gib=round(estimate.kv_needed_gib, 2),
        kv_available_gib=round(estimate.kv_available_gib, 2),
        weights_gib=round(estimate.weights_gib, 2),
    )
