"""Engine personas, in-process: each engine's command line checked against its CLI contract and refused
in the engine's own words and exit status; served names, key mechanisms, thinking defaults, metric names,
tensor parallel against NVIDIA_VISIBLE_DEVICES, and the TensorRT-LLM build stand-ins. No Docker.

The GPU is what cannot exist here: NVIDIA_VISIBLE_DEVICES is set by hand, as Docker's device request would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.support import REPO

from labctl.catalog.engines import list_engine_names
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import list_profile_names, load_profile
from labctl.compose.render import RenderOptions, compose_context
from labctl.harness.engine_cli import EngineExit
from labctl.harness.persona_http import metrics_text, persona_reply
from labctl.harness.personas import Persona, build_persona, persona_from_command_line, visible_gpu_count
from labctl.harness.trtllm_build import build, convert

LAB = Lab(REPO)
VLLM_0110 = REPO / "tests" / "fixtures" / "contracts" / "vllm-0.11.0.yaml"
VERSIONS = {"vllm": "0.34.0", "sglang": "0.5.23", "trtllm": "1.2.1", "atlas": "00caf3af"}
EXECUTABLE_WORDS = {"vllm": 1, "sglang": 3, "trtllm": 1, "atlas": 1}  # `vllm`, `python3 -m sglang.launch_server`, …
SHIPPED = [
    (e, p) for e in list_engine_names(LAB) if e in VERSIONS for p in list_profile_names(LAB, e) if e != "harness"
]
GPUS = {"NVIDIA_VISIBLE_DEVICES": "0,1"}


def persona(engine: str, *argv: str, env: dict[str, str] | None = None, contract: Path | None = None) -> Persona:
    env = GPUS if env is None else env
    return build_persona(engine, VERSIONS[engine], list(argv), env, str(contract) if contract else None)[0]


def refused(engine: str, *argv: str, env: dict[str, str] | None = None, contract: Path | None = None) -> EngineExit:
    with pytest.raises(EngineExit) as info:
        persona(engine, *argv, env=env, contract=contract)
    return info.value


def rendered_argv(engine: str, profile_name: str, files: Path) -> tuple[list[str], dict[str, object]]:
    """The words after the engine's executable, exactly as labctl renders them for the serve service; an
    options file is written under `files` with the rendered content, where Compose would mount it."""
    profile = load_profile(LAB, engine, profile_name)
    context = compose_context(profile, RenderOptions(cache_dir="/srv/hf", engine_store="/srv/trt"))
    words = list(context["entrypoint"] or []) + list(context["command"])
    options = context["options_file"]
    if options:
        local = files / Path(options["target"]).name
        local.write_text(options["text"])
        words = [str(local) if w == options["target"] else w for w in words]
    return words[EXECUTABLE_WORDS[engine] :], profile.spec


# ------------------------------------------------------------------ refusals in the engine's words


def test_vllm_0_11_0_refuses_model_option_with_its_value_error() -> None:
    exit_ = refused("vllm", "serve", "--model", "Qwen/Qwen3-8B", contract=VLLM_0110)
    assert exit_.code == 1
    assert exit_.stderr.splitlines()[-1] == (
        "ValueError: With `vllm serve`, you should provide the model as a positional argument or in a config "
        "file instead of via the `--model` option."
    )


def test_vllm_0_34_0_takes_model_option_with_a_warning() -> None:
    p = persona("vllm", "serve", "--model", "Qwen/Qwen3-8B")
    assert p.served_names == ["Qwen/Qwen3-8B"]
    assert any("--model" in w for w in p.warnings)


def test_vllm_unknown_option_is_an_argparse_error() -> None:
    exit_ = refused("vllm", "serve", "Qwen/Qwen3-8B", "--no-such-option", "1")
    assert exit_.code == 2
    lines = exit_.stderr.splitlines()
    assert lines[0].startswith("usage: vllm serve")
    assert lines[-1] == "vllm serve: error: unrecognized arguments: --no-such-option"


def test_vllm_without_serve_is_refused_by_the_top_parser() -> None:
    exit_ = refused("vllm", "Qwen/Qwen3-8B")
    assert exit_.code == 2
    assert "vllm: error: argument subparser: invalid choice: 'Qwen/Qwen3-8B'" in exit_.stderr


def test_sglang_unknown_flag() -> None:
    exit_ = refused("sglang", "--model-path", "Qwen/Qwen3-8B", "--no-such-flag")
    assert exit_.code == 2
    assert exit_.stderr.startswith("usage: launch_server.py ")
    assert exit_.stderr.splitlines()[-1] == "launch_server.py: error: unrecognized arguments: --no-such-flag"


def test_sglang_needs_model_path() -> None:
    exit_ = refused("sglang", "--port", "30000")
    assert exit_.code == 2
    assert "the following arguments are required: --model-path" in exit_.stderr


def test_sglang_invalid_choice() -> None:
    exit_ = refused("sglang", "--model-path", "M", "--tokenizer-mode", "fast")
    assert exit_.code == 2
    assert "argument --tokenizer-mode: invalid choice: 'fast' (choose from 'auto', 'slow')" in exit_.stderr


def test_trtllm_unknown_option_is_a_click_error() -> None:
    exit_ = refused("trtllm", "Qwen/Qwen3-8B", "--served_model_name", "x")
    assert exit_.code == 2
    assert exit_.stderr.startswith("Usage: trtllm-serve [OPTIONS] MODEL\n")
    assert exit_.stderr.rstrip().endswith("Error: No such option: --served_model_name")


def test_trtllm_missing_model() -> None:
    exit_ = refused("trtllm", "--port", "8000")
    assert (exit_.code, exit_.stderr.rstrip().splitlines()[-1]) == (2, "Error: Missing argument 'MODEL'.")


def test_atlas_has_no_revision_clap_exits_2() -> None:
    exit_ = refused("atlas", "serve", "Qwen/Qwen3.6-35B-A3B-FP8", "--revision", "main")
    assert exit_.code == 2
    assert exit_.stderr.splitlines()[0] == "error: unexpected argument '--revision' found"
    assert "Usage: spark serve [OPTIONS] [MODEL]" in exit_.stderr


def test_unknown_version_has_no_contract() -> None:
    with pytest.raises(EngineExit) as info:
        build_persona("vllm", "9.9.9", ["serve", "M"], GPUS)
    assert info.value.code == 2 and "cannot read the engine contract" in info.value.stderr


def test_command_line_split_at_the_double_dash() -> None:
    p, settings = persona_from_command_line(
        ["--persona", "sglang", "--persona-version", "0.5.19", "--", "--model-path", "M", "--port", "30123"], GPUS
    )
    assert (p.engine, p.version, settings.port, settings.host) == ("sglang", "0.5.19", 30123, "127.0.0.1")


# ------------------------------------------------------------------ every shipped profile, as rendered


@pytest.mark.parametrize(("engine", "profile_name"), SHIPPED)
def test_rendered_argv_is_accepted_and_served_name_follows_the_engine(
    engine: str, profile_name: str, tmp_path: Path
) -> None:
    argv, spec = rendered_argv(engine, profile_name, tmp_path)
    model = spec["model"]["id"]  # type: ignore[index]
    if spec.get("build"):  # a built engine: the folder the build step wrote, where the serve argv points
        engine_dir = tmp_path / Path(argv[0]).relative_to("/engines")
        engine_dir.mkdir(parents=True)
        limits = {k: spec["build"][k] for k in ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens")}  # type: ignore[index]
        config = {"build_config": limits, "mapping": {"tp_size": 2, "world_size": 2}}
        (engine_dir / "config.json").write_text(json.dumps(config))
        argv = [str(engine_dir), *argv[1:]]
    p, settings = build_persona(engine, VERSIONS[engine], argv, GPUS)
    if engine == "trtllm":  # no served-name option: MODEL as given, or a built engine's folder name
        expected = spec["served_model_name"] if spec.get("build") else model
        assert p.serves_metrics  # labctl's options file switches /prometheus/metrics on
    else:
        expected = spec["served_model_name"]
    assert p.served_names == [expected]
    assert settings.model == expected
    assert settings.port == spec["port"]


def test_served_name_defaults_to_the_model_argument() -> None:
    assert persona("vllm", "serve", "Qwen/Qwen3-8B").served_names == ["Qwen/Qwen3-8B"]
    assert persona("sglang", "--model-path", "Qwen/Qwen3-8B").served_names == ["Qwen/Qwen3-8B"]
    assert persona("atlas", "serve", "Qwen/Qwen3.6-35B-A3B-FP8").served_names == ["Qwen/Qwen3.6-35B-A3B-FP8"]
    assert persona("trtllm", "Qwen/Qwen3-8B").served_names == ["Qwen/Qwen3-8B"]


def test_served_name_options() -> None:
    assert persona("vllm", "serve", "M", "--served-model-name", "a", "b").served_names == ["a", "b"]
    assert persona("sglang", "--model-path", "M", "--served-model-name", "s").served_names == ["s"]
    assert persona("atlas", "serve", "M", "--model-name", "x").served_names == ["x"]
    assert persona("atlas", "serve", "M", "--served-model-name", "y").served_names == ["y"]


# ------------------------------------------------------------------ tensor parallel vs visible GPUs


def test_visible_gpu_count() -> None:
    assert visible_gpu_count({}) == 0
    assert visible_gpu_count({"NVIDIA_VISIBLE_DEVICES": "void"}) == 0
    assert visible_gpu_count({"NVIDIA_VISIBLE_DEVICES": "all"}) is None
    assert visible_gpu_count({"NVIDIA_VISIBLE_DEVICES": "0,1"}) == 2
    assert visible_gpu_count({"NVIDIA_VISIBLE_DEVICES": "GPU-1234"}) == 1


@pytest.mark.parametrize(
    ("engine", "argv", "message"),
    [
        ("vllm", ["serve", "M", "--tensor-parallel-size", "2"], "World size (2) is larger than"),
        ("vllm", ["serve", "M", "-tp", "2"], "World size (2) is larger than"),
        ("sglang", ["--model-path", "M", "--tp-size", "2"], "invalid device ordinal"),
        ("trtllm", ["M", "--tp_size", "2"], "tp_size 2 needs 2 GPUs"),
        ("atlas", ["serve", "M", "--tp-size", "2"], "--tp-size 2 needs 2 CUDA devices"),
    ],
)
def test_tensor_parallel_above_visible_gpus_is_refused(engine: str, argv: list[str], message: str) -> None:
    exit_ = refused(engine, *argv, env={"NVIDIA_VISIBLE_DEVICES": "0"})
    assert exit_.code == 1 and message in exit_.stderr
    persona(engine, *argv, env={"NVIDIA_VISIBLE_DEVICES": "2,3"})
    persona(engine, *argv, env={"NVIDIA_VISIBLE_DEVICES": "all"})


@pytest.mark.parametrize("engine", sorted(VERSIONS))
def test_no_visible_gpu_is_refused(engine: str) -> None:
    argv = {"vllm": ["serve", "M"], "sglang": ["--model-path", "M"], "trtllm": ["M"], "atlas": ["serve", "M"]}[engine]
    exit_ = refused(engine, *argv, env={})
    assert exit_.code == 1 and "NVIDIA_VISIBLE_DEVICES is unset" in exit_.stderr


# ------------------------------------------------------------------ keys, thinking


def test_vllm_key_from_env_or_flag_guards_its_prefixes_only() -> None:
    p = persona("vllm", "serve", "M", env={**GPUS, "VLLM_API_KEY": "k-env"})
    assert p.api_keys == ["k-env"]
    assert p.guards("/v1/models") and p.guards("/v1/chat/completions")
    assert p.guards("/v2/rerank") and p.guards("/inference/v1/generate") and p.guards("/cohere/v2/chat")
    assert not any(p.guards(path) for path in ("/health", "/metrics", "/version", "/invocations", "/tokenize"))
    assert persona("vllm", "serve", "M", "--api-key", "k-cli", env={**GPUS, "VLLM_API_KEY": "k-env"}).api_keys == [
        "k-cli"
    ]


def test_sglang_key_guards_all_but_health_ready_and_metrics() -> None:
    p = persona("sglang", "--model-path", "M", "--api-key", "k")
    assert p.guards("/v1/models") and p.guards("/get_server_info") and p.guards("/server_info")
    assert not any(p.guards(path) for path in ("/health", "/health_generate", "/metrics", "/ready"))
    assert "api_key" not in p.server_args
    old = build_persona("sglang", "0.5.19", ["--model-path", "M", "--api-key", "k"], GPUS)[0]
    assert old.guards("/ready")  # 0.5.19 has no /ready and no /ready exemption


def test_sglang_serves_metrics_only_with_enable_metrics() -> None:
    assert not persona("sglang", "--model-path", "M").serves_metrics
    assert persona("sglang", "--model-path", "M", "--enable-metrics").serves_metrics
    assert persona("vllm", "serve", "M").serves_metrics and persona("atlas", "serve", "M").serves_metrics


@pytest.mark.parametrize(
    ("content", "serves"),
    [
        ("return_perf_metrics: true\n", True),
        ("return_perf_metrics: 'yes'\n", True),  # a pydantic bool
        ("return_perf_metrics: false\n", False),
        ("perf_metrics_max_requests: 10\n", False),
        ("{}\n", False),
    ],
)
def test_trtllm_serves_prometheus_metrics_only_as_its_options_file_says(
    tmp_path: Path, content: str, serves: bool
) -> None:
    options = tmp_path / "options.yaml"
    options.write_text(content)
    assert persona("trtllm", "M", "--extra_llm_api_options", str(options)).serves_metrics is serves
    assert persona("trtllm", "M", "--config", str(options)).serves_metrics is serves  # the option's other name
    assert not persona("trtllm", "M").serves_metrics


def test_trtllm_refuses_an_options_file_it_cannot_use(tmp_path: Path) -> None:
    missing = refused("trtllm", "M", "--extra_llm_api_options", str(tmp_path / "none.yaml"))
    assert missing.code == 1 and "No such file or directory" in missing.stderr
    (tmp_path / "list.yaml").write_text("- return_perf_metrics\n")
    not_a_mapping = refused("trtllm", "M", "--extra_llm_api_options", str(tmp_path / "list.yaml"))
    assert not_a_mapping.code == 1 and "not a mapping" in not_a_mapping.stderr
    (tmp_path / "bad.yaml").write_text("a: [\n")
    assert refused("trtllm", "M", "--extra_llm_api_options", str(tmp_path / "bad.yaml")).code == 1


def test_atlas_tokens_file_one_key_per_line(tmp_path: Path) -> None:
    tokens = tmp_path / "api_key"
    tokens.write_text("first\nsecond\n")
    p = persona("atlas", "serve", "M", "--require-auth", "--auth-tokens-file", str(tokens))
    assert p.api_keys == ["first", "second"]
    assert p.guards("/v1/models") and not p.guards("/health") and not p.guards("/metrics")
    assert p.guards("/tokenize") and p.guards("/detokenize")  # require_auth_middleware guards these too
    assert persona("atlas", "serve", "M", "--auth-tokens-file", str(tokens)).api_keys == []  # no --require-auth


def test_trtllm_has_no_key() -> None:
    assert persona("trtllm", "M").api_keys == []
    assert not persona("trtllm", "M").guards("/v1/models")


def test_thinking_defaults() -> None:
    off = '{"enable_thinking": false}'
    assert persona("vllm", "serve", "M", "--reasoning-parser", "qwen3").reasoning
    assert not persona("vllm", "serve", "M", "--default-chat-template-kwargs", off).thinking_default
    assert not persona("sglang", "--model-path", "M", "--default-chat-template-kwargs", off).thinking_default
    assert not persona("atlas", "serve", "M", "--disable-thinking").thinking_default
    assert persona("trtllm", "M", "--reasoning_parser", "qwen3").reasoning
    assert not persona("trtllm", "M").reasoning


# ------------------------------------------------------------------ engine routes and metric names


def test_metric_names_per_engine() -> None:
    counters = {
        "requests_success_total": 3,
        "prompt_tokens_total": 30,
        "generation_tokens_total": 90,
    }
    expected = {
        "vllm": [
            "vllm:request_success_total",
            "vllm:generation_tokens_total",
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
        ],
        "sglang": [
            "sglang:num_requests_total",
            "sglang:generation_tokens_total",
            "sglang:num_running_reqs",
            "sglang:num_queue_reqs",
            "sglang:token_usage",
        ],
        "trtllm": ["trtllm_request_success_total", "trtllm_generation_tokens_total"],
        "atlas": ["atlas_requests_total", "atlas_generation_tokens_total"],
    }
    argv = {"vllm": ["serve", "M"], "sglang": ["--model-path", "M"], "trtllm": ["M"], "atlas": ["serve", "M"]}
    for engine, names in expected.items():
        text = metrics_text(persona(engine, *argv[engine]), counters, 1, 2, 8)
        found = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}
        assert set(names) <= found, engine
    old = build_persona("vllm", None, ["serve", "M"], GPUS, str(VLLM_0110.parent / "vllm-0.11.0.yaml"))[0]
    old.version = "0.10.2"
    assert "vllm:gpu_cache_usage_perc" in metrics_text(old, counters, 0, 0, 8)


def test_engine_routes() -> None:
    sglang = persona("sglang", "--model-path", "M", "--tp-size", "2")
    warming = persona_reply(sglang, "/health", False, 100)
    assert warming is not None and (warming.status, warming.delay) == (503, 0.0)
    ready = persona_reply(sglang, "/health", True, 100)
    assert ready is not None and ready.status == 200 and ready.delay > 1.0
    info = persona_reply(sglang, "/get_server_info", True, 100)
    assert info is not None and json.loads(info.body)["version"] == "0.5.23"
    assert json.loads(info.body)["tp_size"] == 2
    assert persona_reply(sglang, "/ready", True, 100) is not None
    old = build_persona("sglang", "0.5.19", ["--model-path", "M"], GPUS)[0]
    assert persona_reply(old, "/ready", True, 100) is None  # /ready came with 0.5.23
    atlas = persona_reply(persona("atlas", "serve", "M", "--model-name", "x"), "/health", True, 100)
    assert atlas is not None and json.loads(atlas.body) == {"status": "ready", "model": "x"}
    version = persona_reply(persona("vllm", "serve", "M"), "/version", True, 100)
    assert version is not None and json.loads(version.body) == {"version": "0.34.0"}


# ------------------------------------------------------------------ TensorRT-LLM build → serve


def built_engine(tmp_path: Path, *build_args: str) -> Path:
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 2}))
    convert(["--model_dir", str(hf), "--output_dir", str(tmp_path / "ckpt"), "--dtype", "bfloat16", "--tp_size", "2"])
    out = tmp_path / "store" / "key" / "qwen3-32b"
    env = {"LABCTL_PERSONA_VERSION": "1.2.1", **GPUS}
    build(["--checkpoint_dir", str(tmp_path / "ckpt"), "--output_dir", str(out), *build_args], env)
    return out


def test_trtllm_build_writes_limits_and_serve_reads_them(tmp_path: Path) -> None:
    out = built_engine(
        tmp_path,
        "--max_batch_size",
        "64",
        "--max_input_len",
        "30720",
        "--max_seq_len",
        "32768",
        "--max_num_tokens",
        "8192",
    )
    config = json.loads((out / "config.json").read_text())
    assert config["build_config"] == {
        "max_batch_size": 64,
        "max_input_len": 30720,
        "max_seq_len": 32768,
        "max_num_tokens": 8192,
    }
    assert config["mapping"]["tp_size"] == 2
    p, settings = build_persona(
        "trtllm", "1.2.1", [str(out), "--max_batch_size", "64", "--max_num_tokens", "8192"], GPUS
    )
    assert p.served_names == ["qwen3-32b"]
    assert (settings.max_num_seqs, settings.max_model_len) == (64, 32768)
    exit_ = refused("trtllm", str(out), "--max_batch_size", "128")
    assert exit_.code == 1
    assert "max_batch_size [128] is greater than build_config.max_batch_size [64]" in exit_.stderr
    # trtllm-serve's own default (2048) is a runtime limit too when the option is left out
    assert "max_batch_size [2048] is greater than" in refused("trtllm", str(out), "--max_num_tokens", "8192").stderr
    # the built engine's TP needs its GPUs
    assert refused("trtllm", str(out), "--max_batch_size", "64", env={"NVIDIA_VISIBLE_DEVICES": "0"}).code == 1


def test_trtllm_build_refuses_unknown_option(tmp_path: Path) -> None:
    with pytest.raises(EngineExit) as info:
        built_engine(tmp_path, "--max_beam_widthh", "1")
    assert info.value.code == 2
    assert info.value.stderr.splitlines()[-1] == "trtllm-build: error: unrecognized arguments: --max_beam_widthh"


def test_each_persona_takes_its_serve_command_and_metrics_route_from_the_engine_folder() -> None:
    assert persona("trtllm", "Qwen/Qwen3-32B").metrics_path == "/prometheus/metrics"
    assert persona("vllm", "serve", "Qwen/Qwen3-32B").metrics_path == "/metrics"


def test_a_bad_engine_folder_stops_the_persona_naming_file_and_field(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(REPO / "engines" / "atlas", tmp_path / "atlas")
    path = tmp_path / "atlas" / "engine.yaml"
    path.write_text(path.read_text().replace("  metrics: /metrics", "  metrics: 'http://elsewhere/metrics'"))
    exit_ = refused("atlas", "serve", "M", env={**GPUS, "LABCTL_PERSONA_ENGINES": str(tmp_path)})
    assert exit_.code == 2 and "engines/atlas/engine.yaml" in exit_.stderr and "endpoints.metrics" in exit_.stderr
