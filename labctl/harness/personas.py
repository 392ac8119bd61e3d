"""Engine personas: the harness taking a real engine's command line and behaving as that engine does
where labctl depends on it (argv refusals, served names, key mechanisms, health, metric names, GPUs).

`python3 -m labctl.harness --persona ENGINE [--persona-version V] [--persona-contract FILE] -- ARGV…`
ARGV is what follows the engine's executable (`vllm`, `python3 -m sglang.launch_server`,
`trtllm-serve`, `spark`). The version comes from `--persona-version` or LABCTL_PERSONA_VERSION and
picks the contract `engines/ENGINE/cli/VERSION.yaml` (or `--persona-contract` / LABCTL_PERSONA_CONTRACT).

What is the engine's own (read from its code, see shared engines.md) and what is the persona's
invention (TensorRT-LLM and Atlas metric names, the GPU refusal wording) is said where it is decided.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labctl.harness.engine_cli import EngineExit, ParsedArgv, Voice, parse_engine_argv
from labctl.harness.model import Settings, parse_settings

if TYPE_CHECKING:
    from labctl.catalog.contracts import Contract

VOICES = {
    "vllm": Voice("vllm serve", "vllm serve [model_tag] [options]"),
    "sglang": Voice("launch_server.py", "launch_server.py [-h] --model-path MODEL_PATH [options]"),
    "trtllm": Voice("trtllm-serve", "trtllm-serve [OPTIONS] MODEL"),
    "atlas": Voice("spark serve", "spark serve [OPTIONS] [MODEL]"),
}
# The words of argv0 after the executable: `vllm serve …`, `spark serve …`.
SUBCOMMAND = {"vllm": "serve", "atlas": "serve"}
DEFAULT_BIND = {"vllm": ("0.0.0.0", 8000), "sglang": ("127.0.0.1", 30000), "trtllm": ("localhost", 8000)}
DEFAULT_BIND["atlas"] = ("127.0.0.1", 8888)
ROUTE = re.compile(r"/[A-Za-z0-9/_.-]{0,127}")  # fullmatch
VLLM_GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")  # vLLM's GUARDED_PREFIX: plain prefixes, no slash
TRTLLM_DEFAULTS = {"max_batch_size": 2048, "max_num_tokens": 8192}  # trtllm-serve's own option defaults
SGLANG_RESOLVED = {
    "kv_cache_dtype": "auto",
    "disable_radix_cache": False,
    "chunked_prefill_size": 8192,
    "speculative_algorithm": None,
    "sampling_defaults": "model",
}


@dataclass
class Persona:
    engine: str
    version: str
    model_arg: str  # the model argument as given (HF id or path)
    served_names: list[str]
    api_keys: list[str] = field(default_factory=list, repr=False)
    reasoning: bool = False  # a reasoning parser is set: thinking goes to reasoning (vLLM) or reasoning_content
    thinking_default: bool = True
    server_args: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    metrics_path: str = "/metrics"  # where it serves Prometheus text: its folder's endpoints.metrics
    tokenizer_info: bool = False  # vLLM serves GET /tokenizer_info only with --enable-tokenizer-info-endpoint

    def guards(self, path: str) -> bool:
        """Whether this engine's key mechanism guards the path (only when a key is set). Each rule is the
        engine's own (engines/ENGINE/http/VERSION.yaml records it; `make contract-check` compares)."""
        if not self.api_keys:
            return False
        if self.engine == "sglang":  # decide_request_auth: everything but /health*, /metrics* (and /ready* ≥ 0.5.23)
            return not path.startswith(("/health", "/metrics", "/ready") if self.has_ready else ("/health", "/metrics"))
        if self.engine == "atlas":  # require_auth_middleware
            return path.startswith("/v1/") or path in ("/tokenize", "/detokenize")
        return path.startswith(VLLM_GUARDED_PREFIX)  # AuthenticationMiddleware (TensorRT-LLM has no key)

    @property
    def has_ready(self) -> bool:
        """SGLang 0.5.23 has /ready (and leaves it open); 0.5.19 has neither."""
        return self.engine == "sglang" and self.version_tuple() >= (0, 5, 23)

    @property
    def serves_metrics(self) -> bool:
        """SGLang mounts /metrics only with --enable-metrics; TensorRT-LLM mounts /prometheus/metrics only when
        its LLM API options set return_perf_metrics; vLLM and Atlas always serve theirs."""
        if self.engine == "sglang":
            return self.server_args.get("enable_metrics") is True
        if self.engine == "trtllm":
            return self.server_args.get("return_perf_metrics") is True
        return True

    def version_tuple(self) -> tuple[int, ...]:
        parts = []
        for part in self.version.split("."):
            if not part.isdigit():
                break
            parts.append(int(part))
        return tuple(parts)


def visible_gpu_count(env: Mapping[str, str]) -> int | None:
    """GPUs Docker's device request made visible (NVIDIA_VISIBLE_DEVICES); None means `all` (uncounted)."""
    raw = env.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if raw in ("", "void", "none"):
        return 0
    if raw == "all":
        return None
    return len([d for d in raw.split(",") if d.strip()])


def _gpu_refusal(engine: str, tp: int, visible: int | None) -> EngineExit | None:
    # Wording modelled on each engine's failure on such a host; persona-written, not copied from the engine.
    if visible == 0:
        message = {
            "vllm": "RuntimeError: Failed to infer device type (no GPU visible: NVIDIA_VISIBLE_DEVICES is unset)",
            "sglang": "RuntimeError: No accelerator (CUDA) is available (NVIDIA_VISIBLE_DEVICES is unset)",
            "trtllm": "RuntimeError: No CUDA GPUs are available (NVIDIA_VISIBLE_DEVICES is unset)",
            "atlas": "Error: no CUDA device found (NVIDIA_VISIBLE_DEVICES is unset)",
        }[engine]
        return EngineExit(message + "\n", 1)
    if visible is not None and tp > visible:
        message = {
            "vllm": f"ValueError: World size ({tp}) is larger than the number of available GPUs ({visible}) in this node.",
            "sglang": f"RuntimeError: CUDA error: invalid device ordinal (--tp-size {tp}, {visible} GPU(s) visible)",
            "trtllm": f"RuntimeError: tp_size {tp} needs {tp} GPUs, only {visible} visible",
            "atlas": f"Error: --tp-size {tp} needs {tp} CUDA devices, found {visible}",
        }[engine]
        return EngineExit(message + "\n", 1)
    return None


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _thinking_off(kwargs_json: str | None) -> bool:
    if not kwargs_json:
        return False
    try:
        kwargs = json.loads(kwargs_json)
    except ValueError:
        return False
    return isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False


def engines_root(env: Mapping[str, str]) -> Path:
    """The engine folders the persona reads (the image holds the lab's engines/ beside labctl/)."""
    return Path(env.get("LABCTL_PERSONA_ENGINES") or str(Path(__file__).resolve().parents[2] / "engines"))


def find_contract_path(engine: str, version: str, explicit: str | None, env: Mapping[str, str]) -> Path:
    if explicit or env.get("LABCTL_PERSONA_CONTRACT"):
        return Path(explicit or env["LABCTL_PERSONA_CONTRACT"])
    from labctl.catalog.contracts import contract_path

    return contract_path(engines_root(env), engine, version)


@dataclass(frozen=True)
class EngineFacts:
    """What the persona takes from the engine's folder: the contract command that serves, and its metrics route."""

    serve_command: str
    metrics_path: str


@functools.lru_cache(maxsize=8)
def load_engine_facts(root: Path, engine: str) -> EngineFacts:
    """engines/ENGINE/engine.yaml's contract.serve and endpoints.metrics, checked as labctl's loader checks them
    (the persona image carries the YAML reader and the contract loader, not the whole catalog)."""
    from labctl.catalog.contracts import SAFE_NAME
    from labctl.catalog.sourcefile import load_yaml_mapping

    src = load_yaml_mapping(root / engine / "engine.yaml", display=f"engines/{engine}/engine.yaml")
    contract, endpoints = src.data.get("contract"), src.data.get("endpoints")
    serve = contract.get("serve") if isinstance(contract, dict) else None
    if not isinstance(serve, str) or not SAFE_NAME.fullmatch(serve):
        raise src.problem(("contract", "serve"), "expected the contract command that serves, e.g. serve.")
    metrics = endpoints.get("metrics") if isinstance(endpoints, dict) else None
    if metrics is not None and (not isinstance(metrics, str) or not ROUTE.fullmatch(metrics)):
        raise src.problem(("endpoints", "metrics"), "expected an HTTP path such as /metrics.")
    return EngineFacts(serve, metrics or "/metrics")


@functools.lru_cache(maxsize=16)
def load_contract_once(path: Path) -> Contract:
    """A contract file parsed once per process (they are large, and a persona reads one)."""
    from labctl.catalog.contracts import load_contract

    return load_contract(path)


def build_persona(
    engine: str, version: str | None, argv: list[str], env: Mapping[str, str], contract: str | None = None
) -> tuple[Persona, Settings]:
    """The persona and harness settings for this engine command line, or EngineExit as the engine would exit."""
    from labctl.errors import LabctlError

    if engine not in _PERSONAS:
        raise EngineExit(f"labctl persona: unknown engine {engine!r}: one of {', '.join(_PERSONAS)}\n", 2)
    version = version or env.get("LABCTL_PERSONA_VERSION")
    if not version and not (contract or env.get("LABCTL_PERSONA_CONTRACT")):
        raise EngineExit("labctl persona: which engine version? set LABCTL_PERSONA_VERSION or --persona-version\n", 2)
    try:
        facts = load_engine_facts(engines_root(env), engine)
        loaded = load_contract_once(find_contract_path(engine, version or "", contract, env))
    except LabctlError as exc:
        raise EngineExit(f"labctl persona: {exc}\n", 2) from None
    version = loaded.version
    cmd = loaded.commands[facts.serve_command]
    words = list(argv)
    sub = SUBCOMMAND.get(engine)
    if sub is not None:
        if not words or words[0] != sub:
            raise _no_subcommand(engine, words[0] if words else None)
        words = words[1:]
    parsed = parse_engine_argv(cmd, words, VOICES[engine])
    persona = _PERSONAS[engine](parsed, env)
    persona.version = version
    persona.metrics_path = facts.metrics_path
    persona.warnings = parsed.warnings + persona.warnings
    return persona, _settings(engine, persona, parsed, env)


def _no_subcommand(engine: str, word: str | None) -> EngineExit:
    if engine == "atlas":
        shown = (
            f"unrecognized subcommand '{word}'" if word else "'spark' requires a subcommand but one was not provided"
        )
        return EngineExit(f"error: {shown}\n\nUsage: spark <COMMAND>\n\nFor more information, try '--help'.\n", 2)
    choice = (
        f"argument subparser: invalid choice: '{word}'" if word else "the following arguments are required: subparser"
    )
    return EngineExit(
        f"usage: vllm [-h] [-v] {{chat,complete,serve,bench,collect-env,run-batch}} ...\nvllm: error: {choice}\n", 2
    )


def _vllm(p: ParsedArgv, env: Mapping[str, str]) -> Persona:
    model = p.positionals[0] if p.positionals else p.get("--model")
    if model is None:
        model = "Qwen/Qwen3-0.6B"  # vLLM's own default model when none is given
    keys = p.all("--api-key") or ([env["VLLM_API_KEY"]] if env.get("VLLM_API_KEY") else [])
    # Its CacheConfig as vllm:cache_config_info states it: the dtype as given (auto kept), prefix caching on unless
    # turned off (the negatives of 0.32.0 and 0.34.0).
    off = p.has("--no-enable-prefix-caching") or p.has("--disable-prefix-caching")
    cache = {"cache_dtype": p.get("--kv-cache-dtype") or "auto", "enable_prefix_caching": str(not off)}
    return Persona(
        "vllm",
        "",
        model,
        p.all("--served-model-name") or [model],
        api_keys=keys,
        reasoning=p.has("--reasoning-parser"),
        thinking_default=not _thinking_off(p.get("--default-chat-template-kwargs")),
        server_args={"cache_config": cache},
        tokenizer_info=p.switched_on("--enable-tokenizer-info-endpoint"),
    )


def _sglang(p: ParsedArgv, env: Mapping[str, str]) -> Persona:
    model = p.get("--model-path")
    if model is None:
        raise EngineExit(
            f"usage: {VOICES['sglang'].usage}\nlaunch_server.py: error: the following arguments are required: "
            "--model-path/--model\n",
            2,
        )
    key = p.get("--api-key")
    server_args: dict[str, Any] = {
        name.lstrip("-").replace("-", "_"): (values[-1] if values != ["true"] else True)
        for name, values in p.by_option.items()
        if values
    }
    return Persona(
        "sglang",
        "",
        model,
        [p.get("--served-model-name") or model],
        api_keys=[key] if key else [],
        reasoning=p.has("--reasoning-parser"),
        thinking_default=not _thinking_off(p.get("--default-chat-template-kwargs")),
        server_args={k: v for k, v in server_args.items() if k not in ("api_key", "admin_api_key")},
    )


def _trtllm(p: ParsedArgv, env: Mapping[str, str]) -> Persona:
    model = p.positionals[0]
    # /v1/models lists MODEL as given, or a local folder's (a built engine's) basename.
    served = Path(model).name if Path(model).is_dir() else model
    options = _llm_api_options(p.get("--extra_llm_api_options"))
    return Persona(
        "trtllm",
        "",
        model,
        [served],
        reasoning=p.has("--reasoning_parser"),
        server_args={
            "return_perf_metrics": _pydantic_bool(options.get("return_perf_metrics", False)),
            # what trtllm_kv_cache_config_info states: KvCacheConfig's dtype and block reuse, defaults auto and on
            "kv_cache_config": {"cache_dtype": "auto", "enable_block_reuse": "True"}
            | {
                label: str(cache[key])
                for key, label in (("dtype", "cache_dtype"), ("enable_block_reuse", "enable_block_reuse"))
                if isinstance(cache := options.get("kv_cache_config"), dict) and key in cache
            },
        },
    )


OPTIONS_FILE_MAX = 1 << 20
_TRUE_WORDS = ("1", "true", "t", "yes", "y", "on")


def _llm_api_options(path: str | None) -> dict[str, Any]:
    """trtllm-serve's --extra_llm_api_options (alias --config): a YAML mapping merged over its own arguments.
    The engine fails at start on a file it cannot read or that is not a mapping; so does the persona."""
    if path is None:
        return {}
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(OPTIONS_FILE_MAX + 1)
    except OSError as exc:
        raise EngineExit(f"{type(exc).__name__}: [Errno {exc.errno}] {exc.strerror}: '{path}'\n", 1) from None
    if len(text) > OPTIONS_FILE_MAX:
        raise EngineExit(f"labctl persona: {path} is larger than {OPTIONS_FILE_MAX} bytes\n", 1)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise EngineExit(f"yaml.YAMLError: {exc}\n", 1) from None
    if not isinstance(data, dict):
        raise EngineExit(f"TypeError: the LLM API options in {path} are not a mapping\n", 1)
    return data


def _pydantic_bool(value: Any) -> bool:
    """return_perf_metrics is a pydantic bool: true, 1 and words such as "yes" count as true."""
    if isinstance(value, str):
        return value.strip().lower() in _TRUE_WORDS
    return value is True or (isinstance(value, int) and value == 1)


def _atlas(p: ParsedArgv, env: Mapping[str, str]) -> Persona:
    model = p.positionals[0] if p.positionals else p.get("--model-from-path")
    if model is None:
        raise EngineExit("Error: no model given: pass MODEL or --model-from-path\n", 1)
    keys: list[str] = []
    if p.has("--require-auth"):
        if p.get("--auth-token"):
            keys.append(p.get("--auth-token") or "")
        token_file = p.get("--auth-tokens-file")
        if token_file:
            try:
                text = Path(token_file).read_text(encoding="utf-8")
            except OSError as exc:
                raise EngineExit(f"Error: cannot read auth tokens file {token_file}: {exc.strerror}\n", 1) from None
            keys += [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
        if not keys:
            raise EngineExit("Error: --require-auth needs --auth-token or --auth-tokens-file with a token\n", 1)
    # Atlas separates Qwen3 thinking on its own (no parser option): persona assumption, see the module doc.
    return Persona(
        "atlas",
        "",
        model,
        [p.get("--model-name") or model],
        api_keys=keys,
        reasoning=True,
        thinking_default=not (p.has("--disable-thinking") or _thinking_off(p.get("--default-chat-template-kwargs"))),
    )


_PERSONAS = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm, "atlas": _atlas}


def _trtllm_engine_limits(persona: Persona, p: ParsedArgv) -> tuple[int | None, int | None, int | None]:
    """(tp, max_seq_len, max_batch_size) of a built engine, refusing runtime limits above the build's as
    `validate_build_config_with_runtime_params` does; (None, None, None) when MODEL is not a built engine."""
    config_file = Path(persona.model_arg) / "config.json"
    if not config_file.is_file():
        return None, None, None
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
        build = config["build_config"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, None, None
    runtime = {
        "max_batch_size": _int(p.get("--max_batch_size"), TRTLLM_DEFAULTS["max_batch_size"]),
        "max_num_tokens": _int(p.get("--max_num_tokens"), TRTLLM_DEFAULTS["max_num_tokens"]),
    }
    for name, value in runtime.items():
        built = build.get(name)
        if isinstance(built, int) and value > built:
            raise EngineExit(
                "[TRT-LLM] [E] Failed to parse the arguments for the LLM constructor: 1 validation error for "
                f"TrtLlmArgs\n  Value error, {name} [{value}] is greater than build_config.{name} [{built}] "
                "in build_config\n",
                1,
            )
    seq = p.get("--max_seq_len")
    if seq is not None and _int(seq, 0) != build.get("max_seq_len"):
        persona.warnings.append(
            f"[TRT-LLM] [W] max_seq_len [{seq}] is overridden by build_config.max_seq_len "
            f"[{build.get('max_seq_len')}] in build_config"
        )
    tp = config.get("mapping", {}).get("tp_size") if isinstance(config.get("mapping"), dict) else None
    return (tp if isinstance(tp, int) else 1), build.get("max_seq_len"), runtime["max_batch_size"]


def _settings(engine: str, persona: Persona, p: ParsedArgv, env: Mapping[str, str]) -> Settings:
    host, port = DEFAULT_BIND[engine]
    base = parse_settings([])
    if engine == "vllm":
        tp = _int(p.get("--tensor-parallel-size"), 1)
        host, port = p.get("--host") or host, _int(p.get("--port"), port)
        max_len, seqs = _int(p.get("--max-model-len"), 32768), _int(p.get("--max-num-seqs"), 256)
    elif engine == "sglang":
        tp = _int(p.get("--tp-size"), 1)
        host, port = p.get("--host") or host, _int(p.get("--port"), port)
        max_len, seqs = _int(p.get("--context-length"), 32768), _int(p.get("--max-running-requests"), 256)
    elif engine == "trtllm":
        tp = _int(p.get("--tp_size"), 1)
        host, port = p.get("--host") or host, _int(p.get("--port"), port)
        max_len = _int(p.get("--max_seq_len"), 32768)
        seqs = _int(p.get("--max_batch_size"), TRTLLM_DEFAULTS["max_batch_size"])
        built_tp, built_len, built_batch = _trtllm_engine_limits(persona, p)
        if built_tp is not None:
            tp, max_len, seqs = built_tp, built_len or max_len, built_batch or seqs
    else:
        tp = _int(p.get("--tp-size"), 1)
        host, port = p.get("--bind") or host, _int(p.get("--port"), port)
        max_len, seqs = _int(p.get("--max-seq-len"), 32768), _int(p.get("--max-num-seqs"), 128)
    refused = _gpu_refusal(engine, tp, visible_gpu_count(env))
    if refused is not None:
        raise refused
    if engine == "sglang":
        # ServerArgs after resolution, as /server_info states them: the defaults of the settings labctl reads
        # (chunked_prefill_size as SGLang picks it for an 80 GB GPU), the given options over them
        for key, value in SGLANG_RESOLVED.items():
            persona.server_args.setdefault(key, value)
        persona.server_args.setdefault("max_running_requests", seqs)
        persona.server_args["host"], persona.server_args["port"] = host, port
        persona.server_args.setdefault("model_path", persona.model_arg)
        persona.server_args["served_model_name"] = persona.served_names[0]
        persona.server_args["tp_size"] = tp
    return dataclasses.replace(
        base,
        model=persona.served_names[0],
        served_names=list(persona.served_names),
        revision=p.get("--revision") or "main",
        host="127.0.0.1" if host == "localhost" else host,
        port=port,
        max_model_len=max_len,
        max_num_seqs=seqs,
        cold_start=float(env.get("LABCTL_PERSONA_LOAD_S", "1")),
        warmup=float(env.get("LABCTL_PERSONA_WARMUP_S", "1")) if engine == "sglang" else 0.0,
        api_keys=[],
        reasoning=persona.reasoning,
        thinking_default=persona.thinking_default,
        dialect="vllm" if engine == "vllm" else "harness",
    )


def split_persona_args(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """`--persona E [--persona-version V] [--persona-contract F] -- ENGINE ARGV…` → (options, engine argv)."""
    options: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i] != "--":
        word = argv[i]
        name, eq, inline = word.partition("=")
        if name not in ("--persona", "--persona-version", "--persona-contract"):
            raise EngineExit(f"labctl persona: unexpected {word!r} before `--` (persona options only)\n", 2)
        if eq:
            options[name[2:]] = inline
            i += 1
        elif i + 1 < len(argv):
            options[name[2:]] = argv[i + 1]
            i += 2
        else:
            raise EngineExit(f"labctl persona: {name} needs a value\n", 2)
    return options, argv[i + 1 :]


def persona_from_command_line(argv: list[str], env: Mapping[str, str] | None = None) -> tuple[Persona, Settings]:
    env = os.environ if env is None else env
    options, engine_argv = split_persona_args(argv)
    return build_persona(
        options.get("persona", ""), options.get("persona-version"), engine_argv, env, options.get("persona-contract")
    )
