"""Will a profile's model fit on the GPUs it targets? The model's size comes from its config.json in the
mounted HF cache when present, else from the profile, else from the models labctl knows; the arithmetic
is `memory.estimate`, under the engine's own meaning of its memory option."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labctl.catalog.memory import KNOWN_MODELS, RULES, Architecture, Estimate, architecture_from_config, estimate
from labctl.catalog.memory import find_config as find_model_config
from labctl.catalog.profiles import Profile

# What `labctl validate` assumes a profile targets when no GPU is at hand: an 80 GB H100 (79.6 GiB as
# nvidia-smi reports it), or a DGX Spark's GB10, whose 128 GB are shared with the host (unified memory).
H100_GIB = 79.6
GB10_GIB = 119.6


# The engines' own defaults when a profile leaves the setting out (SGLang derives ≈ 0.835 for an 80 GB GPU
# at TP1 in server_args.py; the others default to 0.9).
DEFAULT_SETTINGS = {"vllm": 0.9, "sglang": 0.835, "trtllm": 0.9, "atlas": 0.9}


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


def fit(profile: Profile, target: Target, cache_dir: str | None = None) -> Estimate | None:
    """None when the engine has no memory rule (labctl's harness) or the model's size is unknown."""
    engine = profile.engine.name
    arch = architecture_for(profile, cache_dir)
    if engine not in RULES or arch is None:
        return None
    setting = profile.gpu_memory_utilization or DEFAULT_SETTINGS.get(engine, 0.9)
    length = profile.max_model_len or 4096
    return estimate(engine, arch, length, setting, max(profile.gpu_count, 1), target.memory_gib, target.unified_memory)


def _weight_bytes(quantization: str) -> float:
    from labctl.catalog.memory import WEIGHT_BYTES

    return WEIGHT_BYTES.get(quantization, 2.0)
