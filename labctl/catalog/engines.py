"""Engine definitions: what each inference engine is and how it starts (engines/<name>/engine.yaml)."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any

from labctl.catalog.batch_cap import CapRule, CapSetting
from labctl.catalog.contracts import SAFE_NAME, SPEAKER
from labctl.catalog.engine_metrics import (
    COMMON,
    FRACTIONS,
    METRIC_KINDS,
    PROMETHEUS_NAME,
    MetricNames,
    Source,
    Telemetry,
)
from labctl.catalog.engine_settings import SETTINGS_FIELD, SettingRules, setting_rules, settings_problem
from labctl.catalog.fields import MISSING, Field, check_mapping
from labctl.catalog.lab import Lab, check_name
from labctl.catalog.limits import EXACT, finite
from labctl.catalog.memory import KV_SPACES, MemoryRule
from labctl.catalog.placeholders import bad_placeholder
from labctl.catalog.sourcefile import SourceFile, load_yaml_mapping
from labctl.catalog.specs import (
    AuthSpec,
    ContractRef,
    CpuBackend,
    EngineBuild,
    OptionsFile,
    Readiness,
    ServerSpec,
    opt_str,
)
from labctl.errors import BadInput

# Values an argv template may name; each is filled from the resolved profile (or the run).
PLACEHOLDERS = frozenset(
    {
        "model",
        "revision",
        "served_model_name",
        "host",
        "port",
        "max_model_len",
        "max_num_seqs",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "engine_dir",
        "api_key_file",
        "reasoning_parser",
        "build_max_batch_size",
        "build_max_num_tokens",
        "build_max_seq_len",
    }
)

ENVIRONMENT_LABELS = ("harness-check", "real-gpu")
AUTH_KINDS = ("env", "flag", "file", "none")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")  # used with fullmatch: `$` accepts a trailing newline
OPTION_NAME = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# The options file lives in a folder of its own, so that it can shadow none of the image's or labctl's mounts.
OPTIONS_TARGET = re.compile(r"/labctl/[A-Za-z0-9][A-Za-z0-9_-]{0,63}\.ya?ml")
OPTION_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
OPTIONS_MAX_BYTES = 16384
OPTIONS_MAX_DEPTH = 8
MAX_TEXT = 200
MAX_GENERATED = 16
IMAGE_NAME = re.compile(r"[a-z0-9][a-z0-9._/:-]{0,254}")  # fullmatch
MAX_RESERVE_GIB = 64.0
MAX_CAP_SETTINGS = 4
MAX_CAP = 1_000_000


def _plain_data(value: Any, depth: int = 0) -> bool:
    """Plain YAML data: mappings with option-name keys, lists, strings, finite numbers, booleans, null."""
    if depth > OPTIONS_MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return all(
            isinstance(k, str) and OPTION_KEY.fullmatch(k) and _plain_data(v, depth + 1) for k, v in value.items()
        )
    if isinstance(value, list):
        return all(_plain_data(v, depth + 1) for v in value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return finite(value) and abs(value) <= EXACT
    return value is None or isinstance(value, (str, bool))


def _options_content(value: dict[str, Any]) -> bool:
    return bool(value) and _plain_data(value) and len(OptionsFile("-", "/", value).text) <= OPTIONS_MAX_BYTES


def _env_name(value: str) -> bool:
    return ENV_NAME.fullmatch(value) is not None


def _safe_name(value: str) -> bool:
    return SAFE_NAME.fullmatch(value) is not None


def _fraction(value: float) -> bool:
    return 0 < value <= 1


def _text(allowed: str, required: bool = False, default: Any = MISSING) -> Field:
    """One line of prose, bounded."""
    return Field(
        "str",
        f"{allowed} (one line, at most {MAX_TEXT} characters)",
        required=required,
        default=default,
        check=lambda v: 0 < len(v) <= MAX_TEXT and "\n" not in v,
    )


def _str_list(allowed: str) -> Field:
    return Field("list", allowed, item=Field("str", "a string"))


ARG_GROUP = Field(
    "list",
    "a list of argv words, e.g. ['--port', '{port}'] (emitted only when every placeholder has a value)",
    check=lambda v: len(v) > 0,
    item=Field("str", "a string"),
)

MAX_METRIC_CANDIDATES = 4


def _metric_name(value: str) -> bool:
    return PROMETHEUS_NAME.fullmatch(value) is not None


METRIC_CANDIDATES = Field(
    "list",
    f"a list of at most {MAX_METRIC_CANDIDATES} of the engine's own metrics, first present wins (empty: not exported)",
    required=True,
    check=lambda v: len(v) <= MAX_METRIC_CANDIDATES,
    item=Field(
        "map",
        "{metric: NAME, kind: gauge (a count), counter or fraction (a share of one rank), per: NAME (a ratio of "
        "two counters' increases)}",
        fields={
            "metric": Field("str", "a Prometheus metric name", required=True, check=_metric_name),
            "kind": Field("str", "one of " + ", ".join(METRIC_KINDS), required=True, check=lambda v: v in METRIC_KINDS),
            "per": Field("str", "a Prometheus metric name", check=_metric_name),
        },
    ),
)

ENGINE_FIELDS: dict[str, Field] = {
    "title": Field("str", "a display name", required=True),
    "description": Field("str", "one line", required=True),
    "image": Field("str", "the image repository, e.g. vllm/vllm-openai", required=True),
    "environment_label": Field(
        "str", "one of " + ", ".join(ENVIRONMENT_LABELS), required=True, check=lambda v: v in ENVIRONMENT_LABELS
    ),
    "provenance": Field(
        "map",
        "where a build of the engine comes from, when it is not the engine project's own release",
        fields={
            "kind": Field("str", "how it is obtained, e.g. pypi-wheel", required=True),
            "package": Field("str", "the package name", required=True),
            "version": Field("str", "the package version", required=True),
            "wheel": Field("str", "the wheel's file name"),
            "wheel_sha256": Field("str", "64 hex digits", check=lambda v: re.fullmatch(r"[0-9a-f]{64}", v) is not None),
            "upstream": Field("str", "the engine release it packages, and how that is known", required=True),
            "note": Field("str", default=""),
            "image_build": Field("str", "the command that builds its image here, when no registry holds it"),
        },
    ),
    "cpu": Field(
        "map",
        "how a profile's CPU placement reaches an engine with a CPU backend (environment variable names)",
        fields={
            "kv_cache_env": Field(
                "str", "the variable taking the KV cache in GiB", required=True, check=lambda v: _env_name(v)
            ),
            "cores_env": Field(
                "str", "the variable naming the cores its threads bind to", required=True, check=lambda v: _env_name(v)
            ),
        },
    ),
    "gpu": Field(
        "map",
        fields={
            "required": Field("bool", required=True),
            "archs": _str_list("GPU names the image runs on (empty: any NVIDIA GPU)"),
        },
        required=True,
    ),
    "server": Field(
        "map",
        fields={
            "entrypoint": _str_list("the entrypoint argv (null: the image's own)"),
            "args": Field("list", "a list of argv groups", required=True, item=ARG_GROUP),
            "port": Field("int", "the engine's default port (1-65535)", required=True, check=lambda v: 0 < v < 65536),
            "served_name": Field(
                "str",
                "flag (the engine takes a served-name option) or model (it lists the model argument as given)",
                default="flag",
                check=lambda v: v in ("flag", "model"),
            ),
            "thinking_off_args": Field(
                "list", "argv groups that turn the model's thinking off at the server", default=list, item=ARG_GROUP
            ),
            "owns": Field(
                "list",
                "options labctl sets another way (the model positional, a key from the environment) that the "
                "engine's own code would also take, e.g. ['--api-key']",
                default=list,
                item=Field("str", "an option name such as --api-key", check=lambda v: v.startswith("-")),
            ),
        },
        required=True,
    ),
    "readiness": Field(
        "map",
        fields={
            "probe": Field("str", "an HTTP path such as /health", required=True, check=lambda v: v.startswith("/")),
            "probe_timeout_s": Field(
                "float", "seconds one probe may take (0.1-60)", default=2.0, check=lambda v: 0.1 <= v <= 60
            ),
            "watch_interval_s": Field(
                "float",
                "seconds between the restart watcher's probes of a resident engine (0.2-3600)",
                default=10.0,
                check=lambda v: 0.2 <= v <= 3600,
            ),
            "hung_after_failures": Field(
                "int",
                "failed probes in a row (after it was healthy) before a resident engine is restarted as hung (1-100)",
                default=6,
                check=lambda v: 1 <= v <= 100,
            ),
        },
        required=True,
    ),
    "contract": Field(
        "map",
        "which commands of engines/<engine>/cli/<version>.yaml describe this engine's command lines",
        fields={
            "serve": Field("str", "the contract command that serves, e.g. serve", required=True),
            "build": Field("str", "the contract command of the build step, e.g. build"),
            "speaker": Field(
                "str",
                "how the engine's own messages name it, e.g. vLLM (its contract files say the same)",
                check=lambda v: SPEAKER.fullmatch(v) is not None,
            ),
            "generate": Field(
                "map",
                "how `make contracts` reads its contracts from a PyPI wheel (none: they are read from source by hand)",
                fields={
                    "package": Field("str", "the PyPI package", required=True, check=_safe_name),
                    "parser": Field(
                        "str", "whose argparse parser the wheel holds, e.g. vllm", required=True, check=_safe_name
                    ),
                    "versions": Field(
                        "list",
                        f"the versions profiles pin, at most {MAX_GENERATED}",
                        required=True,
                        check=lambda v: 0 < len(v) <= MAX_GENERATED,
                        item=Field("str", "a version such as 0.34.0", check=_safe_name),
                    ),
                    "image": Field(
                        "str",
                        "read inside this image, which holds the wheel (LABCTL_<ENGINE>_IMAGE overrides it)",
                        check=lambda v: IMAGE_NAME.fullmatch(v) is not None,
                    ),
                },
            ),
        },
    ),
    "memory_setting": Field(
        "map",
        "the engine's own memory option and what it means",
        fields={
            "flag": Field("str", "the option, e.g. --gpu-memory-utilization", required=True),
            "meaning": Field("str", "what the fraction is a share of, in the engine's own terms", required=True),
            "default": Field(
                "float", "the engine's own value when a profile sets none, a fraction in (0, 1]", check=_fraction
            ),
            "default_from": _text("where that default was read (the engine's file or documentation)"),
            "fit": Field(
                "map",
                "the memory fit's arithmetic for this engine (validate, up's preflight, studies)",
                fields={
                    "kv_space": Field(
                        "str",
                        "what the fraction is a share of: one of " + ", ".join(KV_SPACES),
                        required=True,
                        check=lambda v: v in KV_SPACES,
                    ),
                    "share": _text("the fraction's meaning, as the fit prints it", required=True),
                    "reserve_gib": Field(
                        "float",
                        f"GiB per GPU the engine keeps outside the KV cache besides the weights (0-{MAX_RESERVE_GIB})",
                        required=True,
                        check=lambda v: 0 <= v <= MAX_RESERVE_GIB,
                    ),
                    "reserve_why": _text("what that reserve holds", required=True),
                    "fp8_kv_cache": _text("how the engine is told to keep an FP8 KV cache", required=True),
                    "too_small": _text("what the engine does when one sequence does not fit", default=""),
                },
            ),
        },
    ),
    "batch_cap": Field(
        "map",
        "the engine's own options that bound the sequences it runs at once (the smallest one known caps the batch)",
        fields={
            "settings": Field(
                "list",
                f"1-{MAX_CAP_SETTINGS} options: {{flag, default, default_from, meaning}}",
                required=True,
                check=lambda v: 0 < len(v) <= MAX_CAP_SETTINGS,
                item=Field(
                    "map",
                    "{flag: --max-num-seqs, default: 256 or null, default_from: where it was read, meaning: ...}",
                    fields={
                        "flag": Field(
                            "str",
                            "the option, e.g. --max-num-seqs",
                            required=True,
                            check=lambda v: OPTION_NAME.fullmatch(v) is not None,
                        ),
                        "default": Field(
                            "int",
                            f"the engine's own value when the command line sets none, 1-{MAX_CAP} (null: the "
                            "engine fixes no number)",
                            check=lambda v: 0 < v <= MAX_CAP,
                        ),
                        "default_from": _text(
                            "where that default was read, or how the engine derives one", required=True
                        ),
                        "meaning": _text("what the option bounds, in the engine's terms", default=""),
                    },
                ),
            ),
        },
    ),
    "endpoints": Field(
        "map",
        fields={
            "version": Field("str", "a path, or null"),
            "metrics": Field("str", "a path, or null"),
        },
        default=lambda: {"version": None, "metrics": None},
    ),
    "telemetry": Field(
        "map",
        "the engine's Prometheus names under labctl's common ones, each a list of candidates",
        fields={
            "names_from": _text("where the names were read (repository@commit path)", required=True),
            **{common: METRIC_CANDIDATES for common in COMMON},
        },
    ),
    "settings": SETTINGS_FIELD,
    "docker": Field(
        "map",
        fields={
            "ipc": Field("str", "host, or shareable", check=lambda v: v in ("host", "shareable", "private")),
            "shm_size": Field("str", "a size such as 16g", check=lambda v: re.fullmatch(r"\d+[bkmg]?", v) is not None),
            "ulimits": Field("map", "ulimit name to a whole number", item=Field("int", "a whole number")),
        },
        default=lambda: {"ipc": None, "shm_size": None, "ulimits": None},
    ),
    "model_cache": Field("str", "the container path where the model cache mounts, or null"),
    "auth": Field(
        "map",
        fields={
            "kind": Field("str", "one of " + ", ".join(AUTH_KINDS), required=True, check=lambda v: v in AUTH_KINDS),
            "env": Field("str", "an environment variable name", check=lambda v: ENV_NAME.fullmatch(v) is not None),
            "args": _str_list("argv words that switch auth on; may name {api_key_file}"),
            "multiple_keys": Field("bool", default=False),
            "note": Field("str", default=""),
        },
        required=True,
    ),
    "resident": Field(
        "map",
        fields={"suited": Field("bool", required=True), "note": Field("str", default="")},
        default=lambda: {"suited": True, "note": ""},
    ),
    "support": Field(
        "map",
        "model family to a list of quantizations",
        required=True,
        item=Field("list", "a list of quantizations", item=Field("str")),
    ),
    "options_file": Field(
        "map",
        "a YAML file the engine reads, which labctl writes into the container and names on its command line",
        fields={
            "flag": Field(
                "str",
                "the option that names the file, e.g. --extra_llm_api_options",
                required=True,
                check=lambda v: OPTION_NAME.fullmatch(v) is not None,
            ),
            "target": Field(
                "str",
                "where the engine finds it: /labctl/NAME.yaml",
                required=True,
                check=lambda v: OPTIONS_TARGET.fullmatch(v) is not None,
            ),
            "content": Field(
                "map",
                f"a non-empty mapping of option names to plain values (strings, numbers, booleans, lists, "
                f"mappings; at most {OPTIONS_MAX_DEPTH} levels and {OPTIONS_MAX_BYTES} bytes as YAML)",
                required=True,
                check=_options_content,
            ),
        },
    ),
    "build": Field(
        "map",
        "how a build->serve profile builds its engine",
        fields={
            "script": Field("str", "a POSIX sh script; profile values arrive as positional parameters", required=True),
            "params": _str_list("names of the positional parameters, in order"),
            "convert": Field("map", "model family to the checkpoint conversion script", item=Field("str")),
            "serve_args": Field("list", "argv groups for serving a built engine", item=ARG_GROUP),
        },
    ),
}


@dataclass(frozen=True)
class Engine:
    name: str
    spec: dict[str, Any]
    source: SourceFile

    @property
    def title(self) -> str:
        return str(self.spec["title"])

    @property
    def image_repository(self) -> str:
        return str(self.spec["image"])

    @property
    def needs_gpu(self) -> bool:
        return bool(self.spec["gpu"]["required"])

    @property
    def cpu_backend(self) -> CpuBackend | None:
        """A real engine that runs on CPU: how a profile's `cpu:` block reaches it."""
        cpu = self.spec["cpu"]
        return (
            None if cpu is None else CpuBackend(kv_cache_env=str(cpu["kv_cache_env"]), cores_env=str(cpu["cores_env"]))
        )

    @property
    def image_build(self) -> str | None:
        """How its image is made on this machine (never pulled), e.g. `make vllm-cpu-image`."""
        provenance = self.spec["provenance"]
        return None if provenance is None else opt_str(provenance["image_build"])

    @property
    def gpu_archs(self) -> tuple[str, ...]:
        """GPU names the image runs on; empty: any NVIDIA GPU."""
        return tuple(self.spec["gpu"]["archs"] or ())

    @property
    def server(self) -> ServerSpec:
        return ServerSpec.from_spec(self.spec["server"])

    @property
    def default_port(self) -> int:
        return int(self.spec["server"]["port"])

    @property
    def readiness(self) -> Readiness:
        ready = self.spec["readiness"]
        return Readiness(
            probe=str(ready["probe"]),
            probe_timeout_s=float(ready["probe_timeout_s"]),
            watch_interval_s=float(ready["watch_interval_s"]),
            hung_after_failures=int(ready["hung_after_failures"]),
        )

    @property
    def auth(self) -> AuthSpec:
        return AuthSpec.from_spec(self.spec["auth"])

    @property
    def contract(self) -> ContractRef | None:
        contract = self.spec["contract"]
        return (
            None
            if contract is None
            else ContractRef(
                serve=str(contract["serve"]), build=opt_str(contract["build"]), speaker=opt_str(contract["speaker"])
            )
        )

    @property
    def build(self) -> EngineBuild | None:
        return None if self.spec["build"] is None else EngineBuild.from_spec(self.spec["build"])

    @property
    def options_file(self) -> OptionsFile | None:
        """The YAML file the engine reads its further options from, if labctl writes one."""
        data = self.spec["options_file"]
        return None if data is None else OptionsFile.from_spec(data)

    @property
    def model_cache(self) -> str | None:
        """The container path where the model cache mounts."""
        return opt_str(self.spec["model_cache"])

    @property
    def docker_options(self) -> dict[str, Any]:
        """ipc, shm_size and ulimits as the compose template takes them (None: Docker's default)."""
        return dict(self.spec["docker"])

    @property
    def metrics_path(self) -> str | None:
        return opt_str(self.spec["endpoints"]["metrics"])

    @property
    def version_path(self) -> str | None:
        return opt_str(self.spec["endpoints"]["version"])

    @property
    def memory_setting(self) -> tuple[str, str] | None:
        """The engine's own memory option and what its fraction is a share of."""
        setting = self.spec["memory_setting"]
        return None if setting is None else (str(setting["flag"]), str(setting["meaning"]))

    @property
    def batch_cap_rule(self) -> CapRule:
        """How the engine's batch cap is read from a command line (no settings: the folder states none)."""
        cap = self.spec["batch_cap"]
        settings = tuple(
            CapSetting(
                flag=str(s["flag"]),
                default=None if s["default"] is None else int(s["default"]),
                default_from=str(s["default_from"]),
                meaning=str(s["meaning"] or ""),
            )
            for s in (cap["settings"] if cap is not None else ())
        )
        return CapRule(self.name, settings)

    @property
    def metric_names(self) -> MetricNames | None:
        """Common name -> the engine's own candidates (None: the folder states none)."""
        telemetry = self.spec["telemetry"]
        if telemetry is None:
            return None
        return {
            common: tuple(Source(str(c["metric"]), str(c["kind"]), opt_str(c["per"])) for c in telemetry[common])
            for common in COMMON
        }

    @property
    def memory_rule(self) -> MemoryRule | None:
        """The memory fit's arithmetic, when the folder states it (memory_setting.fit)."""
        setting = self.spec["memory_setting"]
        rule = None if setting is None else setting["fit"]
        if rule is None:
            return None
        return MemoryRule(
            engine=self.name,
            setting_name=str(setting["flag"]),
            meaning=str(rule["share"]),
            reserve_gib=float(rule["reserve_gib"]),
            reserve_why=str(rule["reserve_why"]),
            kv_dtype_flag=str(rule["fp8_kv_cache"]),
            kv_space=str(rule["kv_space"]),
            too_small=str(rule["too_small"]),
        )

    @property
    def memory_default(self) -> tuple[float, str] | None:
        """The engine's own value of its memory setting, and where that was read."""
        setting = self.spec["memory_setting"]
        if setting is None or setting["default"] is None:
            return None
        return float(setting["default"]), str(setting["default_from"])

    @property
    def setting_rules(self) -> SettingRules | None:
        """How its effective settings are read (engine.yaml `settings`); None: the folder states none."""
        settings = self.spec["settings"]
        return None if settings is None else setting_rules(settings)

    @property
    def resident_suited(self) -> bool:
        return bool(self.spec["resident"]["suited"])

    @property
    def resident_note(self) -> str:
        return str(self.spec["resident"]["note"] or "")

    @property
    def environment_label(self) -> str:
        return str(self.spec["environment_label"])

    @property
    def pins_revision(self) -> bool:
        """Whether the engine's command line can name a model revision at all."""
        build = self.build
        groups = self.server.args + (build.serve_args if build else ())
        return any("{revision}" in word for group in groups for word in group)

    @property
    def supports_build(self) -> bool:
        return self.spec["build"] is not None

    def support_status(self, family: str, quantization: str) -> str | None:
        """None when the engine is known to serve family x quantization, else why not."""
        support: dict[str, list[str]] = self.spec["support"]
        if family not in support:
            return (
                f"model family {family!r} is not in {self.name}'s support matrix (known: {', '.join(sorted(support))})"
            )
        if quantization not in support[family]:
            return (
                f"quantization {quantization!r} is not in {self.name}'s support matrix for {family} "
                f"(supported: {', '.join(sorted(support[family]))})"
            )
        return None


def _check_placeholders(src: SourceFile, key: tuple[str | int, ...], words: list[str]) -> None:
    for i, word in enumerate(words):
        try:
            names = {name for _, name, _, _ in string.Formatter().parse(word) if name is not None}
        except ValueError as exc:
            raise src.problem((*key, i), f"bad placeholder syntax in {word!r}: {exc}.") from None
        unknown = names - PLACEHOLDERS
        if unknown:
            raise src.problem(
                (*key, i), f"unknown placeholder {{{sorted(unknown)[0]}}}; known: {', '.join(sorted(PLACEHOLDERS))}."
            )
        found = bad_placeholder([word], PLACEHOLDERS)  # a format spec would make render build huge strings
        if found is not None:
            raise src.problem((*key, i), found[2])


def _check_metric_kinds(src: SourceFile, telemetry: dict[str, Any]) -> None:
    """A share of one rank is averaged over ranks and a count summed: each source's kind must say which."""
    for common in COMMON:
        for i, source in enumerate(telemetry[common]):
            if source["per"] is not None:
                continue
            if common in FRACTIONS and source["kind"] != "fraction":
                raise src.problem(
                    ("telemetry", common, i, "kind"),
                    f"{common} is a share of one rank's capacity: say 'kind: fraction' (averaged over ranks, "
                    "not summed), or give two counters with 'per'.",
                )
            if common not in FRACTIONS and source["kind"] == "fraction":
                raise src.problem(
                    ("telemetry", common, i, "kind"),
                    f"{common} is a count: say 'kind: gauge' or 'kind: counter' (summed over ranks).",
                )


def load_engine(lab: Lab, name: str) -> Engine:
    check_name(name, "engine")
    path = lab.engine_dir(name) / "engine.yaml"
    if not path.is_file():
        known = ", ".join(list_engine_names(lab)) or "none"
        raise BadInput(f"unknown engine {name!r}. Engines in this lab: {known}.")
    src = load_yaml_mapping(path, display=str(path.relative_to(lab.root)))
    spec = check_mapping(src, (), src.data, ENGINE_FIELDS)
    for i, group in enumerate(spec["server"]["args"]):
        _check_placeholders(src, ("server", "args", i), group)
    if spec["auth"]["args"]:
        _check_placeholders(src, ("auth", "args"), spec["auth"]["args"])
    if spec["auth"]["kind"] == "env" and not spec["auth"]["env"]:
        raise src.problem(("auth",), "kind 'env' needs 'env: VARIABLE_NAME'.")
    for i, group in enumerate(spec["server"]["thinking_off_args"]):
        _check_placeholders(src, ("server", "thinking_off_args", i), group)
    if spec["cpu"] is not None and spec["gpu"]["required"]:
        raise src.problem(
            ("cpu",), "an engine that needs GPUs has no CPU backend: remove 'cpu:' or set gpu.required: false."
        )
    if spec["cpu"] is not None and spec["environment_label"] == "real-gpu":
        raise src.problem(("environment_label",), "an engine on CPU is never real-gpu: say 'harness-check'.")
    setting = spec["memory_setting"]
    if setting is not None and (setting["default"] is None) != (setting["default_from"] is None):
        raise src.problem(("memory_setting",), "'default' and 'default_from' go together: give both or neither.")
    if setting is not None and setting["fit"] is not None and not spec["gpu"]["required"]:
        raise src.problem(
            ("memory_setting", "fit"), "an engine that needs no GPU has no GPU memory fit: remove it, or gpu.required."
        )
    if spec["telemetry"] is not None and spec["endpoints"]["metrics"] is None:
        raise src.problem(("telemetry",), "metric names need a route that serves them: set endpoints.metrics.")
    if spec["telemetry"] is not None:
        _check_metric_kinds(src, spec["telemetry"])
    if spec["settings"] is not None:
        found = settings_problem(spec["settings"], spec["options_file"] is not None)
        if found is not None:
            raise src.problem(("settings", *found[0]), found[1])
        route = (spec["settings"]["report"] or {}).get("route")
        if route is not None and route not in (spec["endpoints"]["metrics"], spec["endpoints"]["version"]):
            raise src.problem(
                ("settings", "report", "route"),
                "the report route must be one of endpoints.metrics or endpoints.version.",
            )
    if spec["build"] is not None:
        for i, group in enumerate(spec["build"]["serve_args"] or []):
            _check_placeholders(src, ("build", "serve_args", i), group)
    return Engine(name=name, spec=spec, source=src)


def lab_telemetry(lab: Lab) -> Telemetry:
    """Every engine's metric names and metrics route, as the lab's folders state them."""
    engines = [load_engine(lab, name) for name in list_engine_names(lab)]
    names = {e.name: table for e in engines if (table := e.metric_names) is not None}
    return Telemetry(names=names, paths={e.name: path for e in engines if (path := e.metrics_path) is not None})


def lab_batch_caps(lab: Lab) -> dict[str, CapRule]:
    """Every engine's batch-cap rule, as the lab's folders state it."""
    return {name: load_engine(lab, name).batch_cap_rule for name in list_engine_names(lab)}


def list_engine_names(lab: Lab) -> list[str]:
    if not lab.engines_dir.is_dir():
        return []
    return sorted(p.parent.name for p in lab.engines_dir.glob("*/engine.yaml"))
