"""Launch profiles: a small, reviewable file pinning image, model and engine args
(engines/<engine>/profiles/<name>.yaml)."""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any

from labctl.catalog.engines import ENV_NAME, Engine, load_engine
from labctl.catalog.fields import Field, check_mapping
from labctl.catalog.hub_names import REPO_ID_RULE, REVISION_RULE, is_repo_id, is_revision
from labctl.catalog.image import ImageRef
from labctl.catalog.lab import Lab, check_name
from labctl.catalog.owned_flags import check_extra_args
from labctl.catalog.sourcefile import SourceFile, load_yaml_mapping
from labctl.catalog.specs import LOOPBACK_HUB, BuildLimits, CpuPlacement, ModelSpec, opt_float, opt_int, opt_str
from labctl.errors import BadInput


def _is_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


_GPU_INDEX = re.compile(r"[0-9]{1,3}")  # ASCII digits only: str.isdigit() also takes '²' and '٣'
_CORES = re.compile(r"[0-9]{1,4}(-[0-9]{1,4})?(,[0-9]{1,4}(-[0-9]{1,4})?){0,63}")  # "0-1", "0,2-3"


def _on_off(value: str) -> bool:
    return value in ("on", "off")


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(value: str) -> bool:
    """No control character (ESC, newline, …) nor bidirectional override: a name shown on terminals and pages."""
    return _CONTROL.search(value) is None


def _safe_word(value: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", value) is not None


def _argv_word(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


PROFILE_FIELDS: dict[str, Field] = {
    "description": Field("str", "one line saying what this profile is for", required=True),
    "image": Field("str", "repo:tag@sha256:<64 hex>, or repo:tag with 'unpinned: true'", required=True),
    "unpinned": Field("bool", default=False),
    "legacy": Field(
        "str",
        "why this profile is kept but no longer the one to use (one line, up to 300 characters)",
        check=lambda v: 0 < len(v) <= 300 and printable(v) and "\n" not in v,
    ),
    "model": Field(
        "map",
        fields={
            "id": Field("str", REPO_ID_RULE, required=True, check=is_repo_id),
            "revision": Field("str", REVISION_RULE, required=True, check=is_revision),
            "family": Field("str", "a model family from the engine's support matrix", required=True),
            "quantization": Field("str", "a quantization from the engine's support matrix", required=True),
            "thinking": Field("str", '"on" or "off" (quoted: YAML reads a bare on/off as true/false)', check=_on_off),
            "hub": Field(
                "str",
                "'loopback': the lab's own tiny models (build/tiny-models), served by labctl on 127.0.0.1 while it "
                "fetches; absent: the Hugging Face Hub (or HF_ENDPOINT)",
                check=lambda v: v == LOOPBACK_HUB,
            ),
            "reasoning_parser": Field(
                "str", "the engine's reasoning parser for this model, e.g. qwen3", check=_safe_word
            ),
            "architecture": Field(
                "map",
                "the model's size for the memory-fit estimate (used when its config.json is not in the cache)",
                fields={
                    "parameters_b": Field(
                        "float", "billions of parameters, 0.01-5000", check=lambda v: 0.01 <= v <= 5000
                    ),
                    "layers": Field("int", "hidden layers, 1-1000", required=True, check=lambda v: 0 < v <= 1000),
                    "kv_heads": Field("int", "key/value heads, 1-1024", required=True, check=lambda v: 0 < v <= 1024),
                    "head_dim": Field("int", "head dimension, 1-4096", required=True, check=lambda v: 0 < v <= 4096),
                },
            ),
        },
        required=True,
    ),
    "engine_version": Field(
        "str",
        "the engine release (or, for Atlas, source commit) whose CLI contract checks this profile, e.g. 0.34.0",
        check=_safe_word,
    ),
    "cuda": Field("int", "the CUDA major version the image needs, e.g. 12 or 13", check=lambda v: 10 <= v <= 99),
    "served_model_name": Field(
        "str",
        "the model name the OpenAI API serves, without control characters",
        required=True,
        check=lambda v: v.strip() != "" and printable(v),
    ),
    "max_model_len": Field("int", "a whole number of tokens > 0", check=lambda v: v > 0),
    "max_num_seqs": Field("int", "a whole number of sequences > 0", check=lambda v: v > 0),
    "gpu_memory_utilization": Field("float", "a fraction in (0, 1]", check=lambda v: 0 < v <= 1),
    "gpus": Field(
        "map",
        "either device_ids: ['0', '1'] or count: N",
        fields={
            "device_ids": Field(
                "list",
                "a list of GPU indexes such as ['0']",
                item=Field(
                    "str", "a GPU index as a string such as '0'", check=lambda v: _GPU_INDEX.fullmatch(v) is not None
                ),
            ),
            "count": Field("int", "a whole number of GPUs >= 1", check=lambda v: v >= 1),
        },
    ),
    "resources": Field(
        "map",
        "what a scheduler grants the engine besides GPUs (a Slurm cluster: --cpus-per-task, --mem)",
        fields={
            "cpus": Field("int", "CPU cores, 1-1024", check=lambda v: 0 < v <= 1024),
            "memory_gib": Field("float", "host memory in GiB, 0.5-16384", check=lambda v: 0.5 <= v <= 16384),
        },
    ),
    "cpu": Field(
        "map",
        "where an engine with a CPU backend runs: cores: '0-1', memory_gib: N, kv_cache_gib: N",
        fields={
            "cores": Field(
                "str",
                "the cores its threads bind to, e.g. '0-1' or '0,2' (never 'all')",
                required=True,
                check=lambda v: _CORES.fullmatch(v) is not None,
            ),
            "memory_gib": Field(
                "int", "the container's memory limit in GiB, 1-4096", required=True, check=lambda v: 0 < v <= 4096
            ),
            "kv_cache_gib": Field(
                "int", "the KV cache in GiB of host memory, 1-4096", required=True, check=lambda v: 0 < v <= 4096
            ),
        },
    ),
    "port": Field("int", "a TCP port 1-65535", check=lambda v: 0 < v < 65536),
    "host": Field("str", "an IP address to bind, e.g. 127.0.0.1", default="127.0.0.1", check=_is_address),
    "network": Field("str", "host or ports", default="host", check=lambda v: v in ("host", "ports")),
    "extra_args": Field(
        "list", "a list of argv words", default=list, item=Field("any", "a string or number", check=_argv_word)
    ),
    "env": Field(
        "list",
        "a list of environment variable names (never values)",
        default=list,
        item=Field("str", "a variable name such as HF_TOKEN", check=lambda v: ENV_NAME.fullmatch(v) is not None),
    ),
    "build": Field(
        "map",
        "TensorRT-LLM build limits",
        fields={
            "max_batch_size": Field("int", "a whole number > 0", required=True, check=lambda v: v > 0),
            "max_input_len": Field("int", "a whole number > 0", required=True, check=lambda v: v > 0),
            "max_seq_len": Field("int", "a whole number > 0", required=True, check=lambda v: v > 0),
            "max_num_tokens": Field("int", "a whole number > 0", required=True, check=lambda v: v > 0),
            "dtype": Field(
                "str", "bfloat16 or float16", default="bfloat16", check=lambda v: v in ("bfloat16", "float16")
            ),
        },
    ),
}


@dataclass(frozen=True)
class Profile:
    engine: Engine
    name: str
    spec: dict[str, Any]  # resolved: defaults applied, values checked
    source: SourceFile | None

    @property
    def image(self) -> ImageRef:
        return ImageRef.parse(self.spec["image"])

    @property
    def image_text(self) -> str:
        """The image exactly as the profile writes it (repo:tag, or repo:tag@sha256:…)."""
        return str(self.spec["image"])

    @property
    def description(self) -> str:
        return str(self.spec["description"])

    @property
    def unpinned(self) -> bool:
        return bool(self.spec["unpinned"])

    @property
    def legacy(self) -> str | None:
        """Why the profile is kept but no longer the one to use (None: it is current)."""
        return None if self.spec["legacy"] is None else str(self.spec["legacy"])

    @property
    def model(self) -> ModelSpec:
        return ModelSpec.from_spec(self.spec["model"])

    @property
    def engine_version(self) -> str | None:
        return opt_str(self.spec["engine_version"])

    @property
    def cuda(self) -> int | None:
        return opt_int(self.spec["cuda"])

    @property
    def served_model_name(self) -> str:
        return str(self.spec["served_model_name"])

    @property
    def max_model_len(self) -> int | None:
        return opt_int(self.spec["max_model_len"])

    @property
    def max_num_seqs(self) -> int | None:
        return opt_int(self.spec["max_num_seqs"])

    @property
    def gpu_memory_utilization(self) -> float | None:
        return opt_float(self.spec["gpu_memory_utilization"])

    @property
    def port(self) -> int:
        return int(self.spec["port"])

    @property
    def bind_address(self) -> str:
        """The address the engine binds on its host (the profile's `host:` field)."""
        return str(self.spec["host"])

    @property
    def network(self) -> str:
        return str(self.spec["network"])

    @property
    def extra_args(self) -> tuple[str, ...]:
        return tuple(self.spec["extra_args"])

    @property
    def env_names(self) -> tuple[str, ...]:
        """Environment variable names passed through from labctl's environment (never values)."""
        return tuple(self.spec["env"])

    @property
    def build(self) -> BuildLimits | None:
        return None if self.spec["build"] is None else BuildLimits.from_spec(self.spec["build"])

    @property
    def pinned(self) -> bool:
        return self.image.pinned

    @property
    def image_digest(self) -> str | None:
        return self.image.digest

    @property
    def image_repository(self) -> str:
        return self.image.repository

    @property
    def gpu_ids(self) -> list[str]:
        gpus = self.spec["gpus"] or {}
        return list(gpus.get("device_ids") or [])

    @property
    def gpu_count(self) -> int:
        gpus = self.spec["gpus"] or {}
        if gpus.get("device_ids"):
            return len(gpus["device_ids"])
        return int(gpus.get("count") or 0)

    @property
    def cpus(self) -> int | None:
        """A scheduler's CPU request: the profile's resources, else the cores a CPU-placed profile binds to."""
        given = (self.spec.get("resources") or {}).get("cpus")
        cpu = self.cpu
        return given if given is not None else (cpu.core_count if cpu else None)

    @property
    def memory_mib(self) -> int | None:
        """A scheduler's memory request: the profile's resources, else a CPU-placed profile's memory limit."""
        gib = (self.spec.get("resources") or {}).get("memory_gib")
        cpu = self.cpu
        if gib is None and cpu is not None:
            gib = cpu.memory_gib
        return None if gib is None else round(gib * 1024)

    @property
    def cpu(self) -> CpuPlacement | None:
        """Set when the profile runs on CPU (an engine with a CPU backend): no GPU claim, limits rendered."""
        cpu = self.spec.get("cpu")
        return None if cpu is None else CpuPlacement.from_spec(cpu)

    @property
    def support_problem(self) -> str | None:
        model = self.spec["model"]
        return self.engine.support_status(model["family"], model["quantization"])

    @property
    def sha256(self) -> str:
        return profile_hash(self.engine.name, self.spec)


# Where on a host a setup runs (which GPU, which port, which address) does not change what it is.
HOST_SPECIFIC = ("port", "host")


def defining_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The resolved profile less its host-specific values; GPU ids count only as a number of GPUs."""
    out = {k: v for k, v in spec.items() if k not in HOST_SPECIFIC}
    if out.get("resources") is None:  # profiles written before the field keep their hash
        out.pop("resources", None)
    gpus = spec.get("gpus") or {}
    out["gpus"] = len(gpus["device_ids"]) if gpus.get("device_ids") else gpus.get("count", 0)
    return out


def profile_hash(engine: str, spec: dict[str, Any]) -> str:
    canonical = json.dumps({"engine": engine, "profile": defining_spec(spec)}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _check_image(src: SourceFile, spec: dict[str, Any]) -> None:
    image: str = spec["image"]
    try:
        ref = ImageRef.parse(image)
    except ValueError as exc:
        if "digest" in str(exc):
            raise src.problem(("image",), f"{exc}. Run `labctl pin` to fill it in from the registry.") from None
        raise src.problem(
            ("image",), f"{image!r} is not an image reference like repo/name:tag@sha256:<64 hex>."
        ) from None
    if ref.pinned:
        if spec["unpinned"]:
            raise src.problem(("unpinned",), "the image is pinned by digest; remove 'unpinned: true'.")
    elif not spec["unpinned"]:
        raise src.problem(
            ("image",),
            f"{image!r} is not pinned by digest. Pin it (repo:tag@sha256:…, or `labctl pin ENGINE "
            "--profile NAME`), or say 'unpinned: true' to use the tag as it is.",
        )


THINKING_FAMILIES = ("qwen3",)  # families whose chat template thinks unless told not to


def _check_model_facts(engine: Engine, src: SourceFile, spec: dict[str, Any]) -> None:
    model = spec["model"]
    if model["thinking"] is None:
        if model["family"].startswith(THINKING_FAMILIES):
            raise src.problem(
                ("model",), f"{model['family']} models think by default: say 'thinking: on' or 'thinking: off'."
            )
        model["thinking"] = "off"
    if not engine.pins_revision and model["revision"] != "main":
        raise src.problem(
            ("model", "revision"),
            f"{engine.name} cannot pin a model revision (its command line has no revision option): it serves the "
            "hub's main. Use 'revision: main' (the record says the revision was not pinned).",
        )
    if engine.contract is not None and spec["engine_version"] is None:
        raise src.problem(
            (),
            f"say which {engine.name} release this profile runs ('engine_version: X', one of "
            f"{', '.join(engine_versions_with_contracts(engine)) or 'none yet'}): its CLI contract checks the "
            "command line before anything starts.",
        )
    tag_version = _version_in_tag(ImageRef.parse(spec["image"]).tag)
    if spec["engine_version"] and tag_version and tag_version != spec["engine_version"]:
        raise src.problem(
            ("engine_version",),
            f"engine_version {spec['engine_version']} disagrees with the image tag (version {tag_version}).",
        )
    listed_as_given = engine.server.served_name == "model" and spec["build"] is None
    if listed_as_given and spec["served_model_name"] != model["id"]:
        raise src.problem(
            ("served_model_name",),
            f"{engine.name} has no served-name option: its API lists the model as given. Set "
            f"served_model_name: {model['id']}.",
        )
    if spec["build"] is not None and not _safe_word(spec["served_model_name"]):
        raise src.problem(
            ("served_model_name",),
            "a built engine is listed under its folder's name: use letters, digits, '.', '_' or '-' (≤ 64).",
        )


def _version_in_tag(tag: str | None) -> str | None:
    """`v0.34.0` and `v0.5.23-cu129-amd64` carry 0.34.0 and 0.5.23; `latest` carries none."""
    match = re.match(r"v?([0-9]+\.[0-9]+\.[0-9]+(?:rc[0-9]+)?)(?:[-_.].*)?\Z", tag or "")
    return match.group(1) if match else None


def _check_cpu(engine: Engine, src: SourceFile, spec: dict[str, Any]) -> None:
    cpu = spec.get("cpu")
    if engine.cpu_backend is None:
        if cpu is not None:
            raise src.problem(
                ("cpu",), f"{engine.name} has no CPU backend (no 'cpu:' in its engine.yaml): remove 'cpu:'."
            )
        return
    if cpu is None:
        raise src.problem(
            (),
            f"{engine.name} runs on CPU: say where, e.g. 'cpu: {{cores: \"0-1\", memory_gib: 6, kv_cache_gib: 1}}'.",
        )
    backend = engine.cpu_backend
    given = sorted(set(spec["env"]) & {backend.kv_cache_env, backend.cores_env})
    if given:
        raise src.problem(("env",), f"{', '.join(given)} comes from 'cpu:' (rendered from it): remove it from env.")
    for part in cpu["cores"].split(","):
        first, _, last = part.partition("-")
        if last and int(last) < int(first):
            raise src.problem(("cpu", "cores"), f"{part!r} runs backwards: write the lower core first.")
    if cpu["memory_gib"] <= cpu["kv_cache_gib"]:
        raise src.problem(
            ("cpu", "memory_gib"),
            f"{cpu['memory_gib']} GiB cannot hold a {cpu['kv_cache_gib']} GiB KV cache and the engine besides.",
        )


def engine_versions_with_contracts(engine: Engine) -> list[str]:
    folder = engine.source.path.parent / "cli"
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def check_profile_spec(engine: Engine, src: SourceFile, data: dict[str, Any]) -> dict[str, Any]:
    spec = check_mapping(src, (), data, PROFILE_FIELDS)
    # Fields added later are left out when unset, so that every earlier profile keeps its hash.
    for mapping, name in ((spec, "cpu"), (spec["model"], "hub")):
        if mapping[name] is None:
            del mapping[name]
    _check_image(src, spec)
    spec["extra_args"] = [str(word) for word in spec["extra_args"] or []]
    spec["env"] = list(spec["env"] or [])
    gpus = spec["gpus"]
    if gpus is not None:
        if (gpus["device_ids"] is None) == (gpus["count"] is None):
            raise src.problem(("gpus",), "give exactly one of device_ids: ['0', …] or count: N.")
        if gpus["device_ids"] is not None and len(set(gpus["device_ids"])) != len(gpus["device_ids"]):
            raise src.problem(("gpus", "device_ids"), "a GPU is listed twice.")
        gpus = {k: v for k, v in gpus.items() if v is not None}
        spec["gpus"] = gpus
    if not engine.needs_gpu and gpus is not None:
        raise src.problem(
            ("gpus",),
            f"{engine.name} uses no GPU: remove 'gpus:' (it would hold those GPUs for nobody, blocking everyone else).",
        )
    if engine.needs_gpu and gpus is None:
        raise src.problem((), f"{engine.name} needs GPUs: add 'gpus: {{device_ids: [\"0\"]}}' or 'gpus: {{count: 1}}'.")
    _check_cpu(engine, src, spec)
    if spec["port"] is None:
        spec["port"] = engine.default_port
    _check_model_facts(engine, src, spec)
    if spec["build"] is not None and not engine.supports_build:
        raise src.problem(("build",), f"{engine.name} has no build step; remove 'build:'.")
    engine_build = engine.build
    if spec["build"] is not None and engine_build is not None:
        family = spec["model"]["family"]
        if family not in engine_build.convert:
            raise src.problem(
                ("model", "family"),
                f"{engine.name} does not know how to convert a {family!r} checkpoint for a build "
                f"(known: {', '.join(sorted(engine_build.convert))}).",
            )
    check_extra_args(engine, src, spec)
    return spec


def load_profile(lab: Lab, engine_name: str, name: str, allow_unsupported: bool = False) -> Profile:
    engine = load_engine(lab, engine_name)
    check_name(name, "profile")
    path = lab.profile_path(engine_name, name)
    if not path.is_file():
        known = ", ".join(list_profile_names(lab, engine_name)) or "none"
        raise BadInput(f"unknown profile {name!r} for engine {engine_name}. Profiles: {known}.")
    src = load_yaml_mapping(path, display=str(path.relative_to(lab.root)))
    spec = check_profile_spec(engine, src, src.data)
    profile = Profile(engine=engine, name=name, spec=spec, source=src)
    problem = profile.support_problem
    if problem and not allow_unsupported:
        raise src.problem(("model",), f"{problem}. Use a supported combination, or pass --allow-unsupported.")
    return profile


def with_overrides(
    profile: Profile, gpus: list[str] | None = None, port: int | None = None, host: str | None = None
) -> Profile:
    """The same profile placed elsewhere on a host: other GPU ids, another port."""
    spec = copy.deepcopy(profile.spec)
    if gpus is not None:
        if not profile.engine.needs_gpu:
            raise BadInput(
                f"--gpus {','.join(gpus)}: {profile.engine.name} uses no GPU, so it cannot hold one (it would block "
                "those GPUs for everyone else). Drop --gpus."
            )
        if len(gpus) != profile.gpu_count:
            raise BadInput(
                f"--gpus {','.join(gpus)}: profile {profile.name} runs on {profile.gpu_count} GPU(s); "
                f"give exactly {profile.gpu_count} id(s)."
            )
        spec["gpus"] = {"device_ids": list(gpus)}
    if port is not None:
        spec["port"] = port
    if host is not None:
        spec["host"] = host
    return Profile(engine=profile.engine, name=profile.name, spec=spec, source=profile.source)


def list_profile_names(lab: Lab, engine_name: str) -> list[str]:
    folder = lab.engine_dir(engine_name) / "profiles"
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def parse_gpu_ids(text: str | None) -> list[str] | None:
    """`--gpus 0,1` -> ['0', '1']."""
    if text is None:
        return None
    ids = [part.strip() for part in text.split(",")]
    if not ids or any(_GPU_INDEX.fullmatch(part) is None for part in ids):
        raise BadInput(f"--gpus {text!r}: expected GPU indexes separated by commas, e.g. --gpus 0,1.")
    if len(set(ids)) != len(ids):
        raise BadInput(f"--gpus {text!r}: a GPU is listed twice.")
    return ids


def parse_port(port: int | None) -> int | None:
    if port is not None and not 0 < port < 65536:
        raise BadInput(f"--port {port}: expected a TCP port 1-65535.")
    return port
