"""One owner per rendered flag: a profile's extra_args may not set again what labctl renders from the engine
file (engines honour the last one), in any spelling the engine's parser takes: the name, an alias, an
abbreviation argparse accepts, `--flag=value`, `_` for `-`, a short option, or a word the engine reads as its
model positional. Every engine, with and without a CLI contract; shipped profiles keep loading."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.lab_copy import copy_lab
from helpers.support import REPO

from labctl.catalog.contracts import contract_path, load_contract
from labctl.catalog.engines import list_engine_names, load_engine
from labctl.catalog.lab import Lab
from labctl.catalog.owned_flags import owned_options
from labctl.catalog.profiles import list_profile_names, load_profile
from labctl.errors import BadInput

SHIPPED = Lab(REPO)
PROFILES = {
    "vllm": "qwen3-32b",
    "sglang": "qwen3-32b",
    "trtllm": "qwen3-32b",
    "atlas": "qwen3.6-35b-a3b-fp8",
    "harness": "smoke",
}


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return Lab(copy_lab(tmp_path / "lab", ("engines", "templates")))


def with_extra(lab: Lab, engine: str, words: list[str], profile: str | None = None) -> str:
    """Load the engine's profile with these extra_args; the refusal's text ('' when it loads)."""
    name = profile or PROFILES[engine]
    path = lab.profile_path(engine, name)
    data = yaml.safe_load(path.read_text())
    data["extra_args"] = words
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        load_profile(lab, engine, name)
    except BadInput as exc:
        return str(exc)
    return ""


HOSTILE = [
    # host / bind address
    ("vllm", ["--host", "0.0.0.0"], "--host"),
    ("vllm", ["--host=0.0.0.0"], "--host"),
    ("vllm", ["--ho", "0.0.0.0"], "--host"),  # argparse takes an unambiguous prefix
    ("vllm", ["--hos=::"], "--host"),
    ("sglang", ["--host", "0.0.0.0"], "--host"),
    ("sglang", ["--hos=0.0.0.0"], "--host"),
    ("trtllm", ["--host", "0.0.0.0"], "--host"),
    ("trtllm", ["--host=0.0.0.0"], "--host"),
    ("atlas", ["--bind", "0.0.0.0"], "--bind"),
    ("atlas", ["--host", "0.0.0.0"], "--bind"),  # clap alias of --bind
    ("atlas", ["--host=0.0.0.0"], "--bind"),
    ("harness", ["--host", "0.0.0.0"], "--host"),
    ("harness", ["--host=0.0.0.0"], "--host"),
    ("harness", ["--hos", "0.0.0.0"], "--host"),  # no contract: a prefix of a rendered name
    # port
    ("vllm", ["--port", "1"], "--port"),
    ("vllm", ["--port=1"], "--port"),
    ("sglang", ["--por", "1"], "--port"),
    ("trtllm", ["--port", "1"], "--port"),
    ("atlas", ["--port=1"], "--port"),
    ("harness", ["--port", "1"], "--port"),
    # served model name
    ("vllm", ["--served-model-name", "other"], "--served-model-name"),
    ("vllm", ["--served_model_name", "other"], "--served-model-name"),  # vLLM's parser takes _ for -
    ("sglang", ["--served-model", "other"], "--served-model-name"),
    ("atlas", ["--served-model-name=other"], "--served-model-name"),
    ("harness", ["--model", "other"], "--model"),
    # API key / key file
    ("vllm", ["--api-key", "k"], "--api-key"),  # vLLM's --api-key would replace VLLM_API_KEY
    ("vllm", ["--api-k=k"], "--api-key"),
    ("sglang", ["--api-key", "k"], "--api-key"),
    ("atlas", ["--auth-tokens-file", "/dev/null"], "--auth-tokens-file"),
    ("atlas", ["--require-auth"], "--require-auth"),
    ("harness", ["--api-key-file", "/dev/null"], "--api-key-file"),
    # model path
    ("vllm", ["--model", "Other/Model"], "the model"),
    ("vllm", ["Other/Model"], "the positional argument {model}"),
    ("vllm", ["--", "Other/Model"], "the positional argument {model}"),
    ("sglang", ["--model", "Other/Model"], "--model-path"),  # an alias of --model-path
    ("sglang", ["--model-path=Other/Model"], "--model-path"),
    ("trtllm", ["Other/Model"], "the positional argument {model}"),
    ("atlas", ["Other/Model"], "the positional argument {model}"),
    # the rest of what labctl renders
    ("vllm", ["-tp", "8"], "--tensor-parallel-size"),
    ("vllm", ["-tp=8"], "--tensor-parallel-size"),
    ("vllm", ["-t", "8"], "--tensor-parallel-size"),  # argparse abbreviates single-dash options as well
    ("vllm", ["--tensor_parallel_size", "8"], "--tensor-parallel-size"),
    ("vllm", ["--revision", "main"], "--revision"),
    ("vllm", ["--max-model-len", "1024"], "--max-model-len"),
    ("vllm", ["--reasoning-parser", "qwen3"], "--reasoning-parser"),
    ("vllm", ["--default-chat-template-kwargs", "{}"], "--default-chat-template-kwargs"),
    ("sglang", ["--tp", "8"], "--tp-size"),
    ("sglang", ["--mem-fraction-static", "0.99"], "--mem-fraction-static"),
    ("trtllm", ["--tp_size", "8"], "--tp_size"),
    ("trtllm", ["--backend", "tensorrt"], "--backend"),
    ("trtllm", ["--extra_llm_api_options", "/x.yaml"], "--extra_llm_api_options"),  # labctl's options file
    ("trtllm", ["--config=/x.yaml"], "--extra_llm_api_options"),  # the same option's other name
    ("atlas", ["--no-tui"], "--no-tui"),
    ("atlas", ["--max-seq-len", "1"], "--max-seq-len"),
    ("harness", ["--max-num-seqs", "1"], "--max-num-seqs"),
    ("harness", ["--revision", "x"], "--revision"),
    # an owned option after harmless ones
    ("vllm", ["--seed", "0", "--enable-prefix-caching", "--host", "0.0.0.0"], "--host"),
]


@pytest.mark.parametrize(("engine", "words", "flag"), HOSTILE)
def test_extra_args_that_set_a_rendered_flag_are_refused(lab: Lab, engine: str, words: list[str], flag: str) -> None:
    message = with_extra(lab, engine, words)
    profile = PROFILES[engine]
    assert message.startswith(f"engines/{engine}/profiles/{profile}.yaml:"), message
    index = {"--": 1, "--seed": 3}.get(words[0], 0)  # the word that reaches the owned option
    assert f": extra_args[{index}]: " in message
    assert f" {flag}" in message and "which labctl renders" in message and f"engines/{engine}/engine.yaml:" in message
    assert "\n" not in message


def test_a_built_engine_profile_refuses_its_own_rendered_flags(lab: Lab) -> None:
    message = with_extra(lab, "trtllm", ["--tokenizer", "Other/Model"], profile="qwen3-32b-engine")
    assert "sets --tokenizer, which labctl renders (engines/trtllm/engine.yaml:" in message
    assert "build.serve_args" in message and "set the profile's model.id instead" in message


@pytest.mark.parametrize(
    ("engine", "words"),
    [
        ("vllm", ["--seed", "0", "--enable-prefix-caching"]),
        ("vllm", ["--seed=0"]),
        ("sglang", ["--seed", "0"]),
        ("trtllm", ["--log_level", "info"]),
        ("harness", ["--seed", "1", "--jitter", "0.1"]),
    ],
)
def test_other_options_still_load(lab: Lab, engine: str, words: list[str]) -> None:
    assert with_extra(lab, engine, words) == ""


@pytest.mark.parametrize(
    ("engine", "name"), [(e, p) for e in list_engine_names(SHIPPED) for p in list_profile_names(SHIPPED, e)]
)
def test_shipped_profiles_own_nothing_twice(engine: str, name: str) -> None:
    load_profile(SHIPPED, engine, name)


def test_the_owned_set_is_derived_from_the_engine_files_argv_groups() -> None:
    engine = load_engine(SHIPPED, "sglang")
    contract = load_contract(contract_path(REPO / "engines", "sglang", "0.5.23"))
    owned = owned_options(engine, contract.commands["launch_server"])
    rendered = {w for g in engine.server.args + engine.server.thinking_off_args for w in g if w.startswith("--")}
    assert rendered | {"--api-key", "--model"} <= set(owned.options)  # --model: sglang's alias of --model-path
    assert owned.positional is None
    assert "--seed" not in owned.options
