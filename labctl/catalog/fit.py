"""Will a profile's model fit on the GPUs it targets? The model's size comes from its config.json in the
mounted HF cache when present, else from the profile, else from the models labctl knows; the arithmetic
is `memory.estimate`, under the engine's own meaning of its memory option."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labctl.catalog.engines import Engine
from labctl.catalog.memory import (
    KNOWN_MODELS,
    WEIGHT_BYTES,
    Architecture,
    Estimate,
    MemoryRule,
    architecture_from_config,
    estimate,
)
from labctl.catalog.memory import find_config as find_model_config
from labctl.catalog.profiles import Profile

# What `labctl validate` assumes a profile targets when no GPU is at hand: an 80 GB H100 (79.6 GiB as
# nvidia-smi reports it), or a DGX Spark's GB10, whose 128 GB are shared with the host (unified memory).
H100_GIB = 79.6
GB10_GIB = 119.6


@dataclass(frozen=True)
class Target:
    name: str
    memory_gib: float  # per GPU (unified memory: what the host can give)
    unified_memory: bool = False


def default_target(profile: Profile) -> Target:
    if "GB10" in profile.engine.gpu_archs:
        return Target("NVIDIA GB10 (unified memory)", GB10_GIB, unified_memory=True)
    return Target("NVIDIA H100 80GB", H100_GIB)


def architecture_for(profile: Profile, cache_dir: str | None) -> Architecture | None:
    model = profile.model
    quantization = model.quantization
    given = model.architecture
    if cache_dir:
        try:
            config = find_model_config(Path(cache_dir), model.id, model.revision)
            if config is not None:
                return architecture_from_config(config, quantization, given.parameters_b if given else None)
        except ValueError:
            pass  # a damaged or unreadable cache entry: fall back to the profile's numbers
    if given and given.parameters_b:
        known = KNOWN_MODELS.get(model.id)
        return Architecture(
            parameters_b=given.parameters_b,
            layers=given.layers,
            kv_heads=given.kv_heads,
            head_dim=given.head_dim,
            weight_bytes=known.weight_bytes if known else _weight_bytes(quantization),
            source=f"profile ({profile.source.name if profile.source else profile.name})",
        )
    return KNOWN_MODELS.get(model.id)


def memory_rule(engine: Engine) -> MemoryRule:
    """The engine folder's memory arithmetic; an engine that needs GPUs and states none is refused, never skipped."""
    rule = engine.memory_rule
    if rule is None:
        raise engine.source.problem(
            ("memory_setting", "fit") if engine.spec["memory_setting"] else ("memory_setting",),
            "missing: an engine that needs GPUs must state its memory fit (memory_setting: flag, meaning, default, "
            "default_from, fit), or say gpu.required: false. See engines/vllm/engine.yaml.",
        )
    return rule


def default_setting(engine: Engine) -> float:
    """The engine's own memory setting when a profile gives none, as its folder states it."""
    default = engine.memory_default
    if default is None:
        raise engine.source.problem(
            ("memory_setting", "default"),
            "missing: the memory fit needs the engine's own default (with default_from: where it was read), "
            "or a profile that sets gpu_memory_utilization.",
        )
    return default[0]


def fit(profile: Profile, target: Target, cache_dir: str | None = None) -> Estimate | None:
    """None when the engine needs no GPU (gpu.required: false) or the model's size is unknown."""
    if not profile.engine.needs_gpu:
        return None
    rule = memory_rule(profile.engine)
    arch = architecture_for(profile, cache_dir)
    if arch is None:
        return None
    setting = profile.gpu_memory_utilization or default_setting(profile.engine)
    length = profile.max_model_len or 4096
    return estimate(rule, arch, length, setting, max(profile.gpu_count, 1), target.memory_gib, target.unified_memory)


def _weight_bytes(quantization: str) -> float:
    return WEIGHT_BYTES.get(quantization, 2.0)
