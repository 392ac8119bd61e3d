"""Typed values for what an engine definition and a launch profile say, built from their checked mappings.

The mappings stay the serialised truth (records, hashes and exports store them as they are); code that
reads a fact asks these values, so a renamed field breaks the type check instead of a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

ArgGroups = tuple[tuple[str, ...], ...]
LOOPBACK_HUB = "loopback"


def _groups(value: Any) -> ArgGroups:
    return tuple(tuple(str(word) for word in group) for group in value or [])


def _words(value: Any) -> tuple[str, ...]:
    return tuple(str(word) for word in value or [])


def opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


# ---- engine definitions (engines/<engine>/engine.yaml) ----


@dataclass(frozen=True)
class ServerSpec:
    entrypoint: tuple[str, ...]  # empty: the image's own
    args: ArgGroups
    port: int
    served_name: str  # "flag": the engine takes a served-name option; "model": it lists the model as given
    thinking_off_args: ArgGroups
    owns: tuple[str, ...] = ()  # options labctl sets another way that the engine would also take

    @classmethod
    def from_spec(cls, data: dict[str, Any]) -> ServerSpec:
        return cls(
            entrypoint=_words(data["entrypoint"]),
            args=_groups(data["args"]),
            port=int(data["port"]),
            served_name=str(data["served_name"]),
            thinking_off_args=_groups(data["thinking_off_args"]),
            owns=_words(data.get("owns")),
        )


@dataclass(frozen=True)
class CpuBackend:
    kv_cache_env: str  # e.g. VLLM_CPU_KVCACHE_SPACE
    cores_env: str  # e.g. VLLM_CPU_OMP_THREADS_BIND


@dataclass(frozen=True)
class Readiness:
    probe: str
    probe_timeout_s: float
    watch_interval_s: float = 10.0  # a resident engine's watcher: seconds between its probes
    hung_after_failures: int = 6  # failed probes in a row, after it answered, before it is restarted as hung


@dataclass(frozen=True)
class AuthSpec:
    kind: str  # env | flag | file | none
    env: str | None
    args: tuple[str, ...]
    multiple_keys: bool
    note: str

    @classmethod
    def from_spec(cls, data: dict[str, Any]) -> AuthSpec:
        return cls(
            kind=str(data["kind"]),
            env=opt_str(data["env"]),
            args=_words(data["args"]),
            multiple_keys=bool(data["multiple_keys"]),
            note=str(data["note"] or ""),
        )


@dataclass(frozen=True)
class OptionsFile:
    """A YAML file the engine reads, named on its command line (`flag target`); labctl writes `content` there."""

    flag: str
    target: str
    content: dict[str, Any]

    @classmethod
    def from_spec(cls, data: dict[str, Any]) -> OptionsFile:
        return cls(flag=str(data["flag"]), target=str(data["target"]), content=dict(data["content"]))

    @property
    def text(self) -> str:
        """The file as the engine reads it: the values dumped as YAML data, never templated."""
        return yaml.safe_dump(self.content, sort_keys=True, default_flow_style=False, allow_unicode=True)


@dataclass(frozen=True)
class ContractRef:
    serve: str
    build: str | None
    speaker: str | None = None  # how the engine's own messages name it ("vLLM"); None: its folder's name


@dataclass(frozen=True)
class EngineBuild:
    script: str
    params: tuple[str, ...]
    convert: dict[str, str]  # model family -> checkpoint conversion script
    serve_args: ArgGroups

    @classmethod
    def from_spec(cls, data: dict[str, Any]) -> EngineBuild:
        return cls(
            script=str(data["script"]),
            params=_words(data["params"]),
            convert={str(k): str(v) for k, v in (data["convert"] or {}).items()},
            serve_args=_groups(data["serve_args"]),
        )


# ---- launch profiles (engines/<engine>/profiles/<name>.yaml) ----


@dataclass(frozen=True)
class Architecture:
    layers: int
    kv_heads: int
    head_dim: int
    parameters_b: float | None


@dataclass(frozen=True)
class ModelSpec:
    id: str
    revision: str
    family: str
    quantization: str
    thinking: str  # "on" | "off" (filled in at load)
    reasoning_parser: str | None
    architecture: Architecture | None
    hub: str | None = None  # "loopback": the lab's own tiny models, served by labctl on 127.0.0.1 while it fetches

    @property
    def from_loopback_hub(self) -> bool:
        return self.hub == LOOPBACK_HUB

    @classmethod
    def from_spec(cls, data: dict[str, Any]) -> ModelSpec:
        arch = data.get("architecture")
        return cls(
            id=str(data["id"]),
            revision=str(data["revision"]),
            family=str(data["family"]),
            quantization=str(data["quantization"]),
            thinking=str(data.get("thinking") or "off"),
            reasoning_parser=opt_str(data.get("reasoning_parser")),
            architecture=None
            if not arch
            else Architecture(
                layers=int(arch["layers"]),
                kv_heads=int(arch["kv_heads"]),
                head_dim=int(arch["head_dim"]),
                parameters_b=None if arch.get("parameters_b") is None else float(arch["parameters_b"]),
            ),
            hub=opt_str(data.get("hub")),
        )


@dataclass(frozen=True)
class CpuPlacement:
    """A profile that runs on CPU: the cores its threads bind to, the container's memory, the KV cache."""

    cores: str  # "0-1", "0,2": never "all"
    memory_gib: int
    kv_cache_gib: int

    @property
    def core_count(self) -> int:
        count = 0
        for part in self.cores.split(","):
            first, _, last = part.partition("-")
            count += int(last or first) - int(first) + 1
        return count

    @classmethod
    def from_spec(cls, data: dict[str, Any]) -> CpuPlacement:
        return cls(cores=str(data["cores"]), memory_gib=int(data["memory_gib"]), kv_cache_gib=int(data["kv_cache_gib"]))


@dataclass(frozen=True)
class BuildLimits:
    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int
    dtype: str

    @classmethod
    def from_spec(cls, data: dict[str, Any]) -> BuildLimits:
        return cls(
            max_batch_size=int(data["max_batch_size"]),
            max_input_len=int(data["max_input_len"]),
            max_seq_len=int(data["max_seq_len"]),
            max_num_tokens=int(data["max_num_tokens"]),
            dtype=str(data.get("dtype") or "bfloat16"),
        )
