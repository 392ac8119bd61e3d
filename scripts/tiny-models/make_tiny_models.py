"""Make the tiny test models inside the vllm-cpu image (it has torch, transformers, tokenizers and safetensors):
a dense Qwen3 and a Qwen3-MoE of a few MB each, random weights from a fixed seed, a byte-level BPE tokenizer
trained on corpus.txt, and a Qwen3-style chat template that honours enable_thinking.

Every file is written from sorted, seeded data, so the same image makes the same bytes on every run (their
pinned commits on the loopback Hub depend on them). Run by scripts/tiny-models.sh; not a labctl module.
usage: python make_tiny_models.py CORPUS OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

SEED = 20261204
VOCAB = 2048  # trained tokens; the model's vocab_size rounds it and the special tokens up to a multiple of 64
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
# Qwen3's own template, cut to what the tests use: roles, a generation prompt, and the empty think block that
# turns thinking off when enable_thinking is false.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)
COMMON = dict(
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,  # vLLM's CPU attention refuses head_dim=16 ("Unsupported CPU attention configuration")
    intermediate_size=256,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    torch_dtype="bfloat16",
)
MODELS = {
    "tiny-qwen3": (Qwen3Config, dict(architectures=["Qwen3ForCausalLM"])),
    "tiny-qwen3-moe": (
        Qwen3MoeConfig,
        dict(
            architectures=["Qwen3MoeForCausalLM"],
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=128,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        ),
    ),
}


def dump(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def train_tokenizer(corpus: Path) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(corpus)], trainer)
    return tok


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Seeded normal weights drawn in name order (norms at one), independent of transformers' init code."""
    gen = torch.Generator().manual_seed(SEED)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in sorted(model.state_dict().items()):
        if name == "lm_head.weight":  # tied to the embedding
            continue
        if name.endswith("norm.weight"):
            value = torch.ones(tensor.shape)
        else:
            value = torch.randn(tensor.shape, generator=gen) * 0.02
        out[name] = value.to(torch.bfloat16).contiguous()
    return out


def write_model(out: Path, name: str, tok: Tokenizer) -> None:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    ids = {t: tok.token_to_id(t) for t in SPECIAL}
    config_class, extra = MODELS[name]
    vocab_size = -(-tok.get_vocab_size() // 64) * 64
    config = config_class(
        vocab_size=vocab_size,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        **COMMON,
        **extra,
    )
    torch.manual_seed(SEED)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    save_file(weights(model), str(folder / "model.safetensors"), metadata={"format": "pt"})
    config_dict = config.to_dict()
    config_dict.pop("transformers_version", None)  # the image pins it; keep the bytes about the model
    dump(folder / "config.json", config_dict)
    dump(
        folder / "generation_config.json",
        {
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
            "pad_token_id": ids["<|endoftext|>"],
            "do_sample": False,
        },
    )
    tok.save(str(folder / "tokenizer.json"))
    dump(
        folder / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "model_max_length": 4096,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE + "\n")
    (folder / "README.md").write_text(
        f"# {name}\n\nA random-weight {config.model_type} for tests, made by labctl's scripts/tiny-models "
        f"(seed {SEED}). It says nothing sensible: it exists so that a real engine has a model to load.\n"
    )


def main() -> None:
    corpus, out = Path(sys.argv[1]), Path(sys.argv[2])
    torch.use_deterministic_algorithms(True)
    tok = train_tokenizer(corpus)
    for name in sorted(MODELS):
        write_model(out, name, tok)
        print(f"tiny-models: {out / name}")


if __name__ == "__main__":
    main()
