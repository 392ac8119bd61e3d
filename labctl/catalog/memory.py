"""Memory fit: will a model, at a context length, fit the engine's memory setting on these GPUs?

Arithmetic from the architecture (config.json or KNOWN_MODELS); nothing runs on a GPU. Each engine's
setting means something different, so each has its own rule. Pure: reads only the files it is given.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

GIB = 1 << 30
KIB = 1 << 10
MAX_CONFIG_BYTES = 1 << 20
# A margin under this is inside the error of the reserve constants below: say "borderline".
BORDERLINE_GIB = 1.0
# Ways out never suggest a setting above this: the rest is the engines' own headroom.
MAX_SUGGESTED_SETTING = 0.95
TP_SIZES = (2, 4, 8)
_COMMIT = re.compile(r"[0-9a-f]{40}\Z")
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")


@dataclass(frozen=True)
class Architecture:
    parameters_b: float  # total parameters, billions; MoE: all experts (they are all resident)
    layers: int  # layers holding a per-token KV cache (hybrid linear-attention models: full-attention ones)
    kv_heads: int
    head_dim: int
    weight_bytes: float  # bytes per parameter of the checkpoint
    kv_bytes: float = 2.0  # KV cache element size
    source: str = "profile"  # "profile", or where the numbers came from

    def __post_init__(self) -> None:
        numbers = (self.parameters_b, self.layers, self.kv_heads, self.head_dim, self.weight_bytes, self.kv_bytes)
        if not all(n > 0 for n in numbers):
            raise ValueError(f"architecture numbers must all be > 0, got {self}")

    @property
    def weights_gib(self) -> float:
        return self.parameters_b * 1e9 * self.weight_bytes / GIB

    @property
    def kv_per_token_bytes(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes


# Bytes per parameter. 4-bit formats carry scales: NVFP4 one FP8 scale per 16 values (4 + 8/16 bits),
# AWQ/GPTQ an FP16 scale (+ zero) per group of 128, rounded to the same 0.5625; MXFP4 one 8-bit scale per 32.
FOUR_BIT = 0.5625
WEIGHT_BYTES = {
    "fp32": 4.0,
    "float32": 4.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "fp16": 2.0,
    "float16": 2.0,
    "none": 2.0,
    "auto": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "int8": 1.0,
    "w8a8": 1.0,
    "nvfp4": FOUR_BIT,
    "fp4": FOUR_BIT,
    "modelopt_fp4": FOUR_BIT,
    "awq": FOUR_BIT,
    "gptq": FOUR_BIT,
    "int4": FOUR_BIT,
    "w4a16": FOUR_BIT,
    "mxfp4": 4.25 / 8,
}

# Architecture numbers of the models labctl ships profiles for.
# - Qwen/Qwen3-32B: config.json num_hidden_layers 64, num_key_value_heads 8, head_dim 128 (hidden_size 5120,
#   num_attention_heads 64, intermediate_size 25600, vocab_size 151936, tie_word_embeddings false), read from
#   copies of the config in public repositories (search tool); 32.8B parameters per the model card, and
#   the same sum from those fields (32.76B). BF16: 61.0 GiB, as engines.md says.
# - Qwen/Qwen3-32B-FP8: the same architecture; quantization_config quant_method "fp8" (block-wise 128x128).
#   Only the linear layers are FP8: embed_tokens and lm_head (2 x 151936 x 5120 = 1.56B) stay BF16, so
#   (31.2B x 1 + 1.56B x 2) / 32.8B = 1.05 bytes per parameter (derived here, not read from the file list).
# - Qwen/Qwen2.5-7B-Instruct: config.json num_hidden_layers 28, num_attention_heads 28, num_key_value_heads 4,
#   hidden_size 3584 (head_dim 3584 / 28 = 128), intermediate_size 18944, vocab_size 152064 (copies of the
#   config in public repositories); 7.61B parameters per the model card.
# - Qwen/Qwen3.6-35B-A3B-FP8: its config.json was not found in the search corpora. The model card (quoted on
#   mera.a-ai.ru and lilting.ch; Qwen3.5-35B-A3B config copies agree): 35B total, 40 layers laid out as
#   10 x (3 Gated DeltaNet + 1 Gated Attention), Gated Attention 16 Q / 2 KV heads of dim 256, 256 experts
#   (512 intermediate), hidden 2048, vocab 248320. Only the 10 Gated Attention layers keep a per-token KV
#   cache (20 KiB per token at BF16); the DeltaNet layers keep a fixed state per sequence (tens of MiB),
#   not counted. FP8 as for Qwen3-32B-FP8: embeddings + lm_head (1.02B) BF16 -> ~1.03 bytes per parameter.
KNOWN_MODELS: dict[str, Architecture] = {
    "Qwen/Qwen3-32B": Architecture(
        32.8, 64, 8, 128, 2.0, source="KNOWN_MODELS: Qwen/Qwen3-32B config.json, model card"
    ),
    "Qwen/Qwen3-32B-FP8": Architecture(
        32.8, 64, 8, 128, 1.05, source="KNOWN_MODELS: Qwen/Qwen3-32B config.json, FP8 linear layers"
    ),
    "Qwen/Qwen2.5-7B-Instruct": Architecture(
        7.61, 28, 4, 128, 2.0, source="KNOWN_MODELS: Qwen/Qwen2.5-7B-Instruct config.json, model card"
    ),
    "Qwen/Qwen3.6-35B-A3B-FP8": Architecture(
        35.0, 10, 2, 256, 1.03, source="KNOWN_MODELS: Qwen3.6-35B-A3B model card (config.json not seen)"
    ),
}


# ---- config.json ---------------------------------------------------------------------------------------


def find_config(cache_dir: Path, model_id: str, revision: str) -> Path | None:
    """config.json of `model_id` at `revision` in a Hugging Face cache (`<cache>/hub/…` or the hub dir)."""
    if not _MODEL_ID.match(model_id) or ".." in model_id:
        raise ValueError(f"{model_id!r} is not a Hugging Face model id like Org/Name")
    hub = cache_dir / "hub" if (cache_dir / "hub").is_dir() else cache_dir
    repo = hub / ("models--" + model_id.replace("/", "--"))
    if _COMMIT.match(revision):
        commit = revision
    else:
        if not revision or revision.startswith("/") or ".." in revision.split("/"):
            raise ValueError(f"revision {revision!r} is not a branch, tag or commit")
        ref = repo / "refs" / revision
        if not ref.is_file():
            return None
        commit = _read_bounded(ref, 1024).decode("utf-8", "replace").strip()
        if not _COMMIT.match(commit):
            raise ValueError(f"{ref} holds {commit[:60]!r}, not a 40-hex commit: the cache is damaged")
    config = repo / "snapshots" / commit / "config.json"
    return config if config.is_file() else None


def architecture_from_config(path: Path, quantization: str, parameters_b: float | None) -> Architecture:
    """Architecture from an HF config.json; its quantization_config wins over the profile's `quantization`."""
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ValueError(f"{path} is larger than 1 MiB: not a model config.json")
        raw = json.loads(_read_bounded(path, MAX_CONFIG_BYTES))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path} holds a JSON {type(raw).__name__}, not an object")
    # Multimodal wrappers (Qwen3.5/3.6 MoE, Qwen2.5-VL) keep the language model under text_config.
    text = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
    where = f"{path} ({'text_config' if text is not raw else 'top level'})"
    layers = _positive_int(text, "num_hidden_layers", where)
    heads = _positive_int(text, "num_attention_heads", where)
    kv_heads = _positive_int(text, "num_key_value_heads", where) if "num_key_value_heads" in text else heads
    if text.get("head_dim") is not None:
        head_dim = _positive_int(text, "head_dim", where)
    else:
        head_dim = _positive_int(text, "hidden_size", where) // heads
    quant_config = raw.get("quantization_config", text.get("quantization_config"))
    if quant_config is not None:
        weight_bytes, weight_from = _weight_bytes_from_quant_config(quant_config, where)
    else:
        weight_bytes, weight_from = _weight_bytes(quantization), f"quantization {quantization!r}"
    source = f"{path}; weights per {weight_from}"
    if parameters_b is None:
        parameters_b = _estimate_parameters_b(text, layers, heads, kv_heads, head_dim, where)
        source += f"; parameters estimated from the architecture ({parameters_b:.1f}B)"
    elif parameters_b <= 0:
        raise ValueError(f"parameters_b must be > 0, got {parameters_b}")
    kv_layers = _kv_cache_layers(text, layers, where)
    if kv_layers != layers:
        source += f"; {kv_layers} of {layers} layers keep a KV cache (the rest are linear attention)"
    return Architecture(parameters_b, kv_layers, kv_heads, head_dim, weight_bytes, source=source)


def _read_bounded(path: Path, limit: int) -> bytes:
    with path.open("rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data


def _positive_int(d: dict[str, Any], key: str, where: str) -> int:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: {key} must be a whole number > 0, got {value!r}")
    return value


def _weight_bytes(quantization: str) -> float:
    try:
        return WEIGHT_BYTES[quantization.lower()]
    except KeyError:
        known = ", ".join(sorted(WEIGHT_BYTES))
        raise ValueError(f"quantization {quantization!r} has no known size per parameter (known: {known})") from None


def _weight_bytes_from_quant_config(qc: object, where: str) -> tuple[float, str]:
    if not isinstance(qc, dict):
        raise ValueError(f"{where}: quantization_config must be an object")
    method = str(qc.get("quant_method", "")).lower()
    said = f"quantization_config quant_method {method!r}"
    if method in ("fp8", "mxfp4"):
        return WEIGHT_BYTES[method], said
    if method == "compressed-tensors":
        groups = qc.get("config_groups")
        group_bits = {
            g["weights"].get("num_bits")
            for g in (groups.values() if isinstance(groups, dict) else [])
            if isinstance(g, dict) and isinstance(g.get("weights"), dict)
        }
        if group_bits == {8}:
            return 1.0, f"{said}, 8-bit weights"
        if group_bits == {4}:
            return FOUR_BIT, f"{said}, 4-bit weights"
        raise ValueError(f"{where}: compressed-tensors config_groups give weight bits {sorted(map(str, group_bits))}")
    if method == "modelopt":
        nested = qc.get("quantization")
        algo = str(qc.get("quant_algo") or (nested.get("quant_algo") if isinstance(nested, dict) else "")).upper()
        if algo == "FP8":
            return 1.0, f"{said}, quant_algo FP8"
        if algo in ("NVFP4", "W4A16_AWQ", "W4A8_AWQ"):
            return FOUR_BIT, f"{said}, quant_algo {algo}"
        raise ValueError(f"{where}: modelopt quant_algo {algo or None!r} has no known size per parameter")
    if method in ("awq", "gptq"):
        bits = qc.get("bits", qc.get("w_bit", 4))
        if bits == 4:
            return FOUR_BIT, f"{said}, 4-bit"
        if bits == 8:
            return 1.0 + 1 / 16, f"{said}, 8-bit"
        raise ValueError(f"{where}: {method} bits must be 4 or 8, got {bits!r}")
    if method == "bitsandbytes":
        return (FOUR_BIT, f"{said}, 4-bit") if qc.get("load_in_4bit") else (1.0, f"{said}, 8-bit")
    raise ValueError(f"{where}: {said} has no known size per parameter; give the profile's quantization instead")


def _kv_cache_layers(text: dict[str, Any], layers: int, where: str) -> int:
    """Layers with a per-token KV cache: linear-attention (DeltaNet, Mamba) layers keep a fixed-size state."""
    types = text.get("layer_types")
    if isinstance(types, list) and types:
        if not all(isinstance(t, str) for t in types):
            raise ValueError(f"{where}: layer_types must be a list of strings")
        return sum(1 for t in types if "linear" not in t and "mamba" not in t)
    interval = text.get("full_attention_interval")
    if isinstance(interval, int) and not isinstance(interval, bool) and interval > 1:
        return layers // interval
    return layers


def _estimate_parameters_b(
    text: dict[str, Any], layers: int, heads: int, kv_heads: int, head_dim: int, where: str
) -> float:
    """Sum of the big matrices (embeddings, attention, MLP or all experts); norms and biases are noise."""
    hidden = _positive_int(text, "hidden_size", where)
    vocab = _positive_int(text, "vocab_size", where)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    experts = text.get("num_experts") or text.get("num_local_experts") or 0
    if isinstance(experts, int) and not isinstance(experts, bool) and experts > 0:
        per_expert = text.get("moe_intermediate_size") or _positive_int(text, "intermediate_size", where)
        shared = text.get("shared_expert_intermediate_size") or 0
        if not isinstance(per_expert, int) or not isinstance(shared, int):
            raise ValueError(f"{where}: moe_intermediate_size and shared_expert_intermediate_size must be numbers")
        mlp = 3 * hidden * (experts * per_expert + shared) + hidden * experts
    else:
        mlp = 3 * hidden * _positive_int(text, "intermediate_size", where)
    embeddings = vocab * hidden * (1 if text.get("tie_word_embeddings") else 2)
    return (embeddings + layers * (attention + mlp)) / 1e9


# ---- the engines' rules --------------------------------------------------------------------------------

# How an engine's memory setting turns into KV-cache space per GPU, by what its fraction is a share of.
# Each engine's folder names its kind and its own numbers (engines/NAME/engine.yaml memory_setting.fit).
# (formula with {s} setting, {t} total, {w} weights, {r} reserve; the same as arithmetic)
KV_SPACES: dict[str, tuple[str, Callable[[float, float, float, float], float]]] = {
    "share_of_total": ("{s} × {t} − {w} − {r}", lambda s, t, w, r: s * t - w - r),
    "share_after_context": ("{s} × ({t} − {r}) − {w}", lambda s, t, w, r: s * (t - r) - w),
    "share_after_weights": ("{s} × ({t} − {w} − {r})", lambda s, t, w, r: s * (t - w - r)),
}


@dataclass(frozen=True)
class MemoryRule:
    """One engine's memory arithmetic, as its folder states it."""

    engine: str
    setting_name: str
    meaning: str
    reserve_gib: float  # per GPU, kept outside the KV cache besides the weights; an estimate
    reserve_why: str
    kv_dtype_flag: str
    kv_space: str  # a key of KV_SPACES
    too_small: str = ""  # what the engine does when one sequence does not fit

    @property
    def formula(self) -> str:
        return KV_SPACES[self.kv_space][0]

    def kv(self, setting: float, total: float, weights: float, reserve: float) -> float:
        """KV GiB per GPU."""
        return KV_SPACES[self.kv_space][1](setting, total, weights, reserve)


@dataclass(frozen=True)
class Estimate:
    engine: str
    setting_name: str
    setting_value: float
    setting_meaning: str
    gpus: int
    gpu_memory_gib: float  # per GPU (the host's memory on unified-memory machines)
    weights_gib: float  # total; each GPU holds weights_gib / gpus
    kv_per_token_kib: float  # whole model
    kv_needed_gib: float  # one max_model_len sequence, per GPU
    reserve_gib: float  # per GPU
    kv_available_gib: float  # per GPU, under the engine's own meaning of its setting
    fits: bool
    max_tokens_fit: int
    notes: tuple[str, ...]
    architecture: Architecture
    max_model_len: int
    rule: MemoryRule

    def lines(self) -> list[str]:
        rule = self.rule
        many = self.gpus > 1
        per_gpu = " per GPU" if many else ""
        total = self.kv_needed_gib * self.gpus / _kv_share(self.architecture, self.gpus)
        formula = rule.formula.format(
            s=f"{self.setting_value:g}",
            t=f"{self.gpu_memory_gib:.1f}",
            w=f"{self.weights_gib / self.gpus:.1f}",
            r=f"{self.reserve_gib:.1f}",
        )
        out = [
            f"memory fit ({self.engine}, {self.gpus} × {self.gpu_memory_gib:.1f} GiB; arithmetic, nothing measured)",
            f"  weights: {self.weights_gib:.1f} GiB ({self.architecture.parameters_b:g}B parameters × "
            f"{self.architecture.weight_bytes:g} B)"
            + (f", {self.weights_gib / self.gpus:.1f} GiB per GPU" if many else ""),
            f"  KV cache: {self.kv_per_token_kib:g} KiB per token; one {self.max_model_len:,}-token sequence needs "
            f"{total:.1f} GiB" + (f" ({self.kv_needed_gib:.1f} GiB per GPU)" if many else ""),
            f"  engine reserve: {self.reserve_gib:.1f} GiB{per_gpu} ({rule.reserve_why})",
            f"  {self.setting_name} {self.setting_value:g}: {self.setting_meaning}",
            f"  KV space: {formula} = {self.kv_available_gib:.1f} GiB{per_gpu} ≈ {self.max_tokens_fit:,} tokens",
        ]
        out += [f"  note: {note}" for note in self.notes]
        if self.fits:
            out.append(f"fits: room for {self.max_tokens_fit:,} tokens of KV cache ({self.max_model_len:,} needed)")
        else:
            out.append(
                f"does not fit: {self.kv_needed_gib:.1f} GiB{per_gpu} needed for one {self.max_model_len:,}-token "
                f"sequence, {max(self.kv_available_gib, 0):.1f} GiB available"
            )
        return out

    def ways_out(self) -> list[str]:
        if self.fits:
            return []
        arch, rule = self.architecture, self.rule

        def again(arch: Architecture, gpus: int) -> Estimate:
            return estimate(rule, arch, self.max_model_len, self.setting_value, gpus, self.gpu_memory_gib)

        ways = []
        for tp in (n for n in TP_SIZES if n > self.gpus):
            bigger = again(arch, tp)
            if bigger.fits:
                need = _memory_needed(rule, bigger)
                ways.append(
                    f"use {tp} GPUs with tensor parallelism (needs {need:.1f} GiB per GPU at "
                    f"{self.setting_name} {self.setting_value:g})"
                )
                break
        fp8 = replace(arch, weight_bytes=1.0)
        if arch.weight_bytes > 1.0 and again(fp8, self.gpus).fits:
            ways.append(f"the FP8 checkpoint (~{fp8.weights_gib:.1f} GiB weights)")
        fp8_kv = replace(arch, kv_bytes=1.0)
        if arch.kv_bytes > 1.0 and again(fp8_kv, self.gpus).fits:
            ways.append(f"an FP8 KV cache ({rule.kv_dtype_flag}: {fp8_kv.kv_per_token_bytes / KIB:g} KiB per token)")
        needed = _setting_needed(rule, self)
        if needed <= MAX_SUGGESTED_SETTING:
            ways.append(f"{self.setting_name} {needed:.2f} (less headroom for the engine's own use)")
        if self.max_tokens_fit > 0:
            ways.append(f"max_model_len ≤ {self.max_tokens_fit:,} tokens")
        else:
            ways.append("no context length fits: the weights alone exceed the engine's share")
        return ways


def estimate(
    rule: MemoryRule,
    arch: Architecture,
    max_model_len: int,
    setting: float,
    gpus: int,
    gpu_memory_gib: float,
    unified_memory: bool = False,
) -> Estimate:
    """Would one `max_model_len` sequence's KV cache fit beside the weights, under the engine's setting?"""
    if not 0 < setting <= 1:
        raise ValueError(f"{rule.setting_name} must be a fraction in (0, 1], got {setting}")
    if gpus < 1 or gpu_memory_gib <= 0 or max_model_len < 1:
        raise ValueError("gpus, GPU memory and max_model_len must be > 0")
    kv_token_gpu = arch.kv_per_token_bytes * _kv_share(arch, gpus) / gpus
    kv_available = rule.kv(setting, gpu_memory_gib, arch.weights_gib / gpus, rule.reserve_gib)
    kv_needed = max_model_len * kv_token_gpu / GIB
    fits = kv_available >= kv_needed
    notes = []
    if unified_memory:
        notes.append(
            f"unified memory: the GPU reports memory as N/A, so the host's memory ({gpu_memory_gib:.1f} GiB) is "
            "used; the OS, the page cache and other processes share it"
        )
    if abs(kv_available - kv_needed) < BORDERLINE_GIB:
        notes.append(f"borderline: the margin is under {BORDERLINE_GIB:g} GiB, inside this estimate's error")
    if not fits and rule.too_small:
        notes.append(rule.too_small)
    if _kv_share(arch, gpus) > 1:
        notes.append(f"{arch.kv_heads} KV heads over {gpus} GPUs: KV heads are replicated")
    return Estimate(
        engine=rule.engine,
        setting_name=rule.setting_name,
        setting_value=setting,
        setting_meaning=rule.meaning,
        gpus=gpus,
        gpu_memory_gib=gpu_memory_gib,
        weights_gib=arch.weights_gib,
        kv_per_token_kib=arch.kv_per_token_bytes / KIB,
        kv_needed_gib=kv_needed,
        reserve_gib=rule.reserve_gib,
        kv_available_gib=kv_available,
        fits=fits,
        max_tokens_fit=max(0, math.floor(kv_available * GIB / kv_token_gpu)),
        notes=tuple(notes),
        architecture=arch,
        max_model_len=max_model_len,
        rule=rule,
    )


def _kv_share(arch: Architecture, gpus: int) -> float:
    """How many copies of the KV heads tensor parallelism makes: 1 unless GPUs outnumber KV heads."""
    return math.ceil(arch.kv_heads / gpus) * gpus / arch.kv_heads


# Every rule is affine in the total memory and in the setting, so solving for either is one division.
def _memory_needed(rule: MemoryRule, e: Estimate) -> float:
    s, w = e.setting_value, e.weights_gib / e.gpus
    at0, at1 = rule.kv(s, 0, w, rule.reserve_gib), rule.kv(s, 1, w, rule.reserve_gib)
    return (e.kv_needed_gib - at0) / (at1 - at0)


def _setting_needed(rule: MemoryRule, e: Estimate) -> float:
    w, t = e.weights_gib / e.gpus, e.gpu_memory_gib
    at0, at1 = rule.kv(0, t, w, rule.reserve_gib), rule.kv(1, t, w, rule.reserve_gib)
    return math.ceil((e.kv_needed_gib - at0) / (at1 - at0) * 100) / 100 if at1 > at0 else math.inf
