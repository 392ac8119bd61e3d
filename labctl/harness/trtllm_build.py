"""Stand-ins for TensorRT-LLM's build step, so that labctl's build script runs for real in the persona image:

- `convert` (examples/models/core/<family>/convert_checkpoint.py): reads the Hub snapshot's
  config.json and writes a checkpoint folder with a config.json (architecture, dtype, mapping);
- `build` (trtllm-build): checks its argv against the TensorRT-LLM contract's `build` command and
  writes `<output_dir>/config.json` holding the build limits (`build_config`) and the TP size
  (`mapping`), the file `trtllm-serve ENGINE_DIR` reads back (see personas.py).

No weights and no TensorRT engine are produced: the files say so (`labctl_persona_stand_in`).

    python3 -m labctl.harness.trtllm_build build -- ARGV…     (the `trtllm-build` shim)
    python3 -m labctl.harness.trtllm_build convert -- ARGV…   (the convert_checkpoint.py stand-ins)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from labctl.harness.engine_cli import EngineExit, Voice, parse_engine_argv
from labctl.harness.personas import find_contract_path, load_contract_once, visible_gpu_count

STAND_IN = "labctl persona stand-in: no weights, no TensorRT engine"
LIMITS = ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens")
BUILD_DEFAULTS = {"max_batch_size": 2048, "max_input_len": 1024, "max_seq_len": None, "max_num_tokens": 8192}


def convert(argv: list[str]) -> Path:
    parser = argparse.ArgumentParser(prog="convert_checkpoint.py")
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--dtype", default="auto", choices=["auto", "float16", "bfloat16", "float32"])
    parser.add_argument("--tp_size", type=int, default=1)
    parser.add_argument("--pp_size", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        hf_config = json.loads((Path(args.model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineExit(f"OSError: {args.model_dir} does not hold a readable config.json ({exc})\n", 1) from None
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    world = args.tp_size * args.pp_size
    config = {
        "architecture": (hf_config.get("architectures") or ["unknown"])[0],
        "dtype": hf_config.get("torch_dtype", "bfloat16") if args.dtype == "auto" else args.dtype,
        "num_hidden_layers": hf_config.get("num_hidden_layers"),
        "mapping": {"world_size": world, "tp_size": args.tp_size, "pp_size": args.pp_size},
        "labctl_persona_stand_in": STAND_IN,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    for rank in range(world):
        (out / f"rank{rank}.safetensors").write_bytes(b"")
    print(f"[TRT-LLM] [I] Total time of converting checkpoints: 00:00:00 ({STAND_IN})")
    return out


def build(argv: list[str], env: Mapping[str, str]) -> Path:
    from labctl.errors import LabctlError

    version = env.get("LABCTL_PERSONA_VERSION", "")
    try:
        contract = load_contract_once(find_contract_path("trtllm", version, None, env))
    except LabctlError as exc:
        raise EngineExit(f"labctl persona: {exc}\n", 2) from None
    parsed = parse_engine_argv(contract.commands["build"], argv, Voice("trtllm-build", "trtllm-build [-h] [options]"))
    if visible_gpu_count(env) == 0:
        raise EngineExit("RuntimeError: No CUDA GPUs are available (NVIDIA_VISIBLE_DEVICES is unset)\n", 1)
    ckpt = parsed.get("--checkpoint_dir")
    if ckpt is None:
        raise EngineExit("AssertionError: --checkpoint_dir is required to build an engine\n", 1)
    try:
        ckpt_config = json.loads((Path(ckpt) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineExit(f"FileNotFoundError: {ckpt}/config.json: {exc}\n", 1) from None
    limits: dict[str, int | None] = {}
    for name in LIMITS:
        given = parsed.get(f"--{name}")
        limits[name] = int(given) if given is not None else BUILD_DEFAULTS[name]
    mapping = ckpt_config.get("mapping") or {"world_size": 1, "tp_size": 1, "pp_size": 1}
    out = Path(parsed.get("--output_dir") or "engine_outputs")
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "version": contract.version,
        "pretrained_config": {**ckpt_config, "mapping": mapping},
        "build_config": limits,
        "mapping": mapping,
        "labctl_persona_stand_in": STAND_IN,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    for rank in range(int(mapping.get("world_size", 1))):
        (out / f"rank{rank}.engine").write_bytes(b"")
    print(f"[TRT-LLM] [I] Total time of building all engines: 00:00:00 ({STAND_IN})")
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] not in ("build", "convert"):
        sys.stderr.write("usage: python3 -m labctl.harness.trtllm_build build|convert -- ARGV…\n")
        return 2
    words = argv[2:] if argv[1:2] == ["--"] else argv[1:]
    try:
        if argv[0] == "build":
            build(words, os.environ)
        else:
            convert(words)
    except EngineExit as refused:
        sys.stderr.write(refused.stderr)
        return refused.code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
