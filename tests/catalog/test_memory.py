"""Memory fit: engines.md's figures come out of the arithmetic, each engine's setting keeps its own
meaning, and config.json is read from a real Hugging Face cache layout (built here, no network).

Tolerances: engines.md gives rounded figures ("≈ 61 GiB", "≈ 7.5–9 GiB", "≈ 6 GiB ≈ 25k tokens"); the
estimate must land within ±0.5 GiB of a single figure, inside a stated range, and within ±1,500 tokens
of a token count. Exact arithmetic (256 KiB per token, 8 GiB per sequence) must be exact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.support import REPO

from labctl.catalog import memory
from labctl.catalog.engines import load_engine
from labctl.catalog.lab import Lab
from labctl.catalog.memory import (
    KNOWN_MODELS,
    Architecture,
    Estimate,
    MemoryRule,
    architecture_from_config,
    find_config,
)
from labctl.errors import BadInput

# Each engine's rule as its folder states it (engines/NAME/engine.yaml memory_setting.fit).
RULES: dict[str, MemoryRule] = {}
for _name in ("vllm", "sglang", "trtllm", "atlas"):
    _rule = load_engine(Lab(REPO), _name).memory_rule
    assert _rule is not None, _name
    RULES[_name] = _rule


def estimate(engine: str, *args: Any, unified_memory: bool = False) -> Estimate:
    """memory.estimate under the shipped engine folder's rule."""
    return memory.estimate(RULES[engine], *args, unified_memory=unified_memory)


H100_GIB = 79.6  # an 80 GB H100 as engines.md counts it
GB10_HOST_GIB = 119.6  # a DGX Spark's host memory (the GPU reports N/A); a stand-in figure for the test
QWEN3_32B = KNOWN_MODELS["Qwen/Qwen3-32B"]
QWEN3_32B_FP8 = KNOWN_MODELS["Qwen/Qwen3-32B-FP8"]
QWEN36_FP8 = KNOWN_MODELS["Qwen/Qwen3.6-35B-A3B-FP8"]
COMMIT = "9216db5781bf21249d130ec9da846c4624c16137"

# Qwen/Qwen3-32B's config.json fields (as published; see KNOWN_MODELS for where they were read).
QWEN3_32B_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "head_dim": 128,
    "hidden_size": 5120,
    "intermediate_size": 25600,
    "max_position_embeddings": 40960,
    "model_type": "qwen3",
    "num_attention_heads": 64,
    "num_hidden_layers": 64,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}


# ---- engines.md's figures -----------------------------------------------------------------------------


def test_qwen3_32b_weights_and_kv_per_token_are_engines_md_figures() -> None:
    e = estimate("sglang", QWEN3_32B, 32768, 0.85, 1, H100_GIB)
    assert e.weights_gib == pytest.approx(61, abs=0.5)
    assert e.kv_per_token_kib == 256  # 2 × 64 layers × 8 KV heads × 128 × 2 B
    assert e.kv_needed_gib == 8.0  # 32,768 × 256 KiB


def test_vllm_at_0_9_on_one_h100_leaves_7_5_to_9_gib_and_says_borderline() -> None:
    e = estimate("vllm", QWEN3_32B, 32768, 0.9, 1, H100_GIB)
    assert 7.5 <= e.kv_available_gib <= 9.0
    assert any(n.startswith("borderline") for n in e.notes)


def test_sglang_at_0_85_on_one_h100_gets_about_6_gib_25k_tokens_and_does_not_fit_32k() -> None:
    e = estimate("sglang", QWEN3_32B, 32768, 0.85, 1, H100_GIB)
    assert e.kv_available_gib == pytest.approx(6, abs=0.5)
    assert e.max_tokens_fit == pytest.approx(25_000, abs=1_500)
    assert not e.fits
    assert any("rejects requests longer" in n for n in e.notes)


def test_sglang_ways_out_name_two_gpus_fp8_and_a_shorter_context() -> None:
    ways = estimate("sglang", QWEN3_32B, 32768, 0.85, 1, H100_GIB).ways_out()
    text = "\n".join(ways)
    assert "use 2 GPUs with tensor parallelism (needs " in text
    assert "the FP8 checkpoint (~30.5 GiB weights)" in ways
    shorter = [w for w in ways if w.startswith("max_model_len ≤ ")]
    assert len(shorter) == 1 and 24_000 <= int(shorter[0].split()[2].replace(",", "")) < 32_768


def test_two_h100s_with_tensor_parallelism_fit() -> None:
    e = estimate("sglang", QWEN3_32B, 32768, 0.85, 2, H100_GIB)
    assert e.fits and e.ways_out() == []
    assert e.kv_needed_gib == 4.0  # 8 KV heads split 4 + 4


def test_the_fp8_checkpoint_fits_one_h100_under_every_engine() -> None:
    for engine in ("vllm", "sglang", "trtllm"):
        e = estimate(engine, QWEN3_32B_FP8, 32768, 0.9 if engine != "sglang" else 0.85, 1, H100_GIB)
        assert e.fits, e.lines()
    assert QWEN3_32B_FP8.weights_gib == pytest.approx(33e9 / 2**30, abs=1.5)  # engines.md: ≈ 33 GB


# ---- each engine's own meaning --------------------------------------------------------------------------


def test_each_engine_applies_its_setting_to_what_its_docs_say() -> None:
    arch = Architecture(10.0, 10, 8, 128, 1.0)  # 10e9 B of weights = 9.31 GiB
    w, t = arch.weights_gib, 80.0
    expected = {
        "vllm": 0.5 * t - w - RULES["vllm"].reserve_gib,
        "sglang": 0.5 * (t - RULES["sglang"].reserve_gib) - w,
        "trtllm": 0.5 * (t - w - RULES["trtllm"].reserve_gib),
        "atlas": 0.5 * t - w - RULES["atlas"].reserve_gib,
    }
    for engine, kv in expected.items():
        e = estimate(engine, arch, 1024, 0.5, 1, t)
        assert e.kv_available_gib == pytest.approx(kv), engine
    assert estimate("trtllm", arch, 1024, 0.5, 1, t).setting_name == "--kv_cache_free_gpu_memory_fraction"
    assert estimate("sglang", arch, 1024, 0.5, 1, t).setting_name == "--mem-fraction-static"


def test_kv_heads_are_replicated_when_gpus_outnumber_them() -> None:
    e = estimate("vllm", QWEN36_FP8, 32768, 0.9, 4, H100_GIB)  # 2 KV heads on 4 GPUs: one each
    assert e.kv_needed_gib == pytest.approx(32768 * 10 * 1024 / 2**30)  # half the model's 20 KiB per token
    assert any("replicated" in n for n in e.notes)


def test_gb10_unified_memory_uses_the_host_memory_and_says_so() -> None:
    e = estimate("atlas", QWEN36_FP8, 262144, 0.9, 1, GB10_HOST_GIB, unified_memory=True)
    assert e.fits
    assert e.kv_per_token_kib == 20  # only the 10 Gated Attention layers: 2 × 10 × 2 × 256 × 2 B
    assert any("unified memory" in n and "host" in n for n in e.notes)
    assert any("unified memory" in line for line in e.lines())


def test_lines_give_the_numbers_then_the_verdict() -> None:
    lines = estimate("sglang", QWEN3_32B, 32768, 0.85, 1, H100_GIB).lines()
    assert lines[0].startswith("memory fit (sglang, 1 × 79.6 GiB")
    assert "  KV space: 0.85 × (79.6 − 0.5) − 61.1 = 6.1 GiB ≈ 25,150 tokens" in lines
    assert lines[-1] == "does not fit: 8.0 GiB needed for one 32,768-token sequence, 6.1 GiB available"
    assert estimate("sglang", QWEN3_32B, 32768, 0.85, 2, H100_GIB).lines()[-1].startswith("fits: room for ")


def test_weights_that_do_not_fit_at_all_leave_no_context_length() -> None:
    e = estimate("vllm", QWEN3_32B, 4096, 0.5, 1, H100_GIB)
    assert e.max_tokens_fit == 0 and not e.fits
    assert e.ways_out()[-1].startswith("no context length fits")


@pytest.mark.parametrize(
    ("engine", "setting", "gpus"), [("ollama", 0.9, 1), ("vllm", 0.0, 1), ("vllm", 1.5, 1), ("vllm", 0.9, 0)]
)
def test_bad_estimate_input_is_refused(engine: str, setting: float, gpus: int) -> None:
    if engine not in RULES:  # an engine without a folder has no rule: refused where its folder is read
        with pytest.raises(BadInput, match="unknown engine"):
            load_engine(Lab(REPO), engine)
        return
    with pytest.raises(ValueError):
        estimate(engine, QWEN3_32B, 32768, setting, gpus, H100_GIB)


# ---- config.json in a Hugging Face cache ------------------------------------------------------------


def hf_cache(root: Path, model_id: str, config: object, branch: str = "main") -> Path:
    """<root>/hub/models--Org--Name/{refs/<branch>, snapshots/<commit>/config.json}, as huggingface_hub lays it out."""
    repo = root / "hub" / ("models--" + model_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / branch).write_text(COMMIT)  # huggingface_hub writes no trailing newline
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config) if not isinstance(config, str) else config)
    return snapshot / "config.json"


def test_find_config_follows_a_branch_ref_or_takes_a_commit(tmp_path: Path) -> None:
    path = hf_cache(tmp_path, "Qwen/Qwen3-32B", QWEN3_32B_CONFIG)
    assert find_config(tmp_path, "Qwen/Qwen3-32B", "main") == path
    assert find_config(tmp_path / "hub", "Qwen/Qwen3-32B", "main") == path
    assert find_config(tmp_path, "Qwen/Qwen3-32B", COMMIT) == path
    assert find_config(tmp_path, "Qwen/Qwen3-32B", "dev") is None
    assert find_config(tmp_path, "Qwen/Qwen3-32B", "0" * 40) is None
    assert find_config(tmp_path, "Qwen/Qwen2.5-7B-Instruct", "main") is None


def test_find_config_refuses_a_damaged_ref_and_paths_outside_the_cache(tmp_path: Path) -> None:
    path = hf_cache(tmp_path, "Qwen/Qwen3-32B", QWEN3_32B_CONFIG)
    (path.parents[2] / "refs" / "main").write_text("not a commit")
    with pytest.raises(ValueError, match="damaged"):
        find_config(tmp_path, "Qwen/Qwen3-32B", "main")
    with pytest.raises(ValueError):
        find_config(tmp_path, "Qwen/Qwen3-32B", "../../etc")
    with pytest.raises(ValueError):
        find_config(tmp_path, "../Qwen3-32B", "main")


def test_qwen3_32b_config_gives_the_known_architecture(tmp_path: Path) -> None:
    path = hf_cache(tmp_path, "Qwen/Qwen3-32B", QWEN3_32B_CONFIG)
    arch = architecture_from_config(path, "bf16", 32.8)
    known = QWEN3_32B
    assert (arch.layers, arch.kv_heads, arch.head_dim, arch.weight_bytes) == (64, 8, 128, 2.0)
    assert arch.parameters_b == known.parameters_b and str(path) in arch.source


def test_parameters_are_estimated_when_the_profile_has_none_and_source_says_so(tmp_path: Path) -> None:
    arch = architecture_from_config(hf_cache(tmp_path, "Qwen/Qwen3-32B", QWEN3_32B_CONFIG), "bf16", None)
    assert arch.parameters_b == pytest.approx(32.8, rel=0.01)  # the model card's count
    assert "estimated" in arch.source


def test_head_dim_falls_back_to_hidden_size_over_heads(tmp_path: Path) -> None:
    qwen25 = {  # Qwen/Qwen2.5-7B-Instruct's fields: no head_dim
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
    }
    arch = architecture_from_config(hf_cache(tmp_path, "Qwen/Qwen2.5-7B-Instruct", qwen25), "bf16", None)
    assert (arch.layers, arch.kv_heads, arch.head_dim) == (28, 4, 128)
    assert arch.parameters_b == pytest.approx(KNOWN_MODELS["Qwen/Qwen2.5-7B-Instruct"].parameters_b, rel=0.02)


def test_quantization_config_overrides_the_profile(tmp_path: Path) -> None:
    fp8 = QWEN3_32B_CONFIG | {
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    }
    arch = architecture_from_config(hf_cache(tmp_path, "Qwen/Qwen3-32B-FP8", fp8), "bf16", 32.8)
    assert arch.weight_bytes == 1.0 and "quant_method 'fp8'" in arch.source


@pytest.mark.parametrize(
    ("quantization_config", "weight_bytes"),
    [
        ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {"num_bits": 8}}}}, 1.0),
        ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {"num_bits": 4}}}}, 0.5625),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, 0.5625),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, 0.5625),
    ],
)
def test_quantization_methods_have_their_sizes(
    tmp_path: Path, quantization_config: object, weight_bytes: float
) -> None:
    config = QWEN3_32B_CONFIG | {"quantization_config": quantization_config}
    arch = architecture_from_config(hf_cache(tmp_path, "Org/Model", config), "bf16", 32.8)
    assert arch.weight_bytes == weight_bytes


def test_hybrid_moe_config_counts_only_full_attention_layers(tmp_path: Path) -> None:
    qwen36 = {  # the Qwen3.5/3.6 MoE shape: the language model under text_config, 3 linear : 1 full
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
        "vision_config": {"depth": 27},
        "text_config": {
            "hidden_size": 2048,
            "head_dim": 256,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "num_hidden_layers": 40,
            "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10,
            "full_attention_interval": 4,
            "num_experts": 256,
            "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512,
            "vocab_size": 248320,
            "tie_word_embeddings": False,
        },
    }
    arch = architecture_from_config(hf_cache(tmp_path, "Qwen/Qwen3.6-35B-A3B-FP8", qwen36), "bf16", None)
    assert (arch.layers, arch.kv_heads, arch.head_dim, arch.weight_bytes) == (10, 2, 256, 1.0)
    assert arch.parameters_b == pytest.approx(35, rel=0.05)  # all 256 experts count; the card says 35B
    assert "10 of 40 layers" in arch.source


def test_a_huge_config_is_refused_before_reading(tmp_path: Path) -> None:
    path = hf_cache(tmp_path, "Org/Model", "{}")
    path.write_bytes(b" " * (1024 * 1024 + 1))
    with pytest.raises(ValueError, match="1 MiB"):
        architecture_from_config(path, "bf16", 1.0)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "JSON list, not an object"),
        (json.dumps({k: v for k, v in QWEN3_32B_CONFIG.items() if k != "num_hidden_layers"}), "num_hidden_layers"),
        (json.dumps(QWEN3_32B_CONFIG | {"num_key_value_heads": True}), "num_key_value_heads"),
        (json.dumps(QWEN3_32B_CONFIG | {"num_attention_heads": -1}), "num_attention_heads"),
        (json.dumps(QWEN3_32B_CONFIG | {"quantization_config": {"quant_method": "magic"}}), "'magic'"),
    ],
)
def test_a_malformed_config_is_refused_with_the_reason(tmp_path: Path, config: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        architecture_from_config(hf_cache(tmp_path, "Org/Model", config), "bf16", 1.0)


def test_an_unknown_profile_quantization_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no known size"):
        architecture_from_config(hf_cache(tmp_path, "Org/Model", QWEN3_32B_CONFIG), "q3_k_m", 1.0)


def test_a_missing_config_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read"):
        architecture_from_config(tmp_path / "config.json", "bf16", 1.0)
