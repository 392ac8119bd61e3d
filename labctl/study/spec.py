"""A study file: what is fixed (model series, workloads, suites, SLO, repeats, environment), what varies (engine
profiles and a small grid of overrides each), and where it runs (hosts). Read as hostile data through the lab's
own loaders; every problem is one line naming file, line and field."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labctl.catalog.fields import Field, check_mapping
from labctl.catalog.hub_names import REPO_ID_RULE, REVISION_RULE, is_repo_id, is_revision
from labctl.catalog.sourcefile import SourceFile, load_yaml_mapping

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")  # a folder of the home: always fullmatch
WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_PROFILES = 16
MAX_GRID = 16  # values of one override
MAX_CELLS = 512  # (cell, repeat)s of a whole study: weeks of GPU time already; more is a second study
MAX_HOSTS = 16
MAX_LEVELS = 64
MAX_REPEATS = 10
MAX_NOTE = 600
ACCELERATORS = ("gpu", "simulated", "cpu")
# What an override may change: the batch limits a study raises to the levels it tests, the context, the
# memory setting, and extra argv words (appended, so the engine's contract still checks them).
OVERRIDE_KEYS = ("max_num_seqs", "max_model_len", "gpu_memory_utilization", "max_batch_size", "extra_args")
# Targets for the memory-fit estimate a profile entry may name (per GPU; GB10 shares the host's memory).
TARGET_GPUS = {"H100": (79.6, False), "H200": (139.8, False), "B200": (178.4, False), "GB10": (119.6, True)}


LM_EVAL = "lm-eval:"  # a suite named so is a task set of suites/lm-eval/, run by lm-evaluation-harness


def _name(value: str) -> bool:
    return NAME.fullmatch(value) is not None


def _word(value: str) -> bool:
    return WORD.fullmatch(value) is not None


def _suite_name(value: str) -> bool:
    return _word(value.removeprefix(LM_EVAL))


def _levels(value: list[Any]) -> bool:
    return 0 < len(value) <= MAX_LEVELS and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)


def _grid_values(value: list[Any]) -> bool:
    return 0 < len(value) <= MAX_GRID


_LEVELS = Field("list", f"a list of 1-{MAX_LEVELS} whole numbers > 0, e.g. [1, 8, 64]", check=_levels)
FIELDS: dict[str, Field] = {
    "study": Field("str", "a name of lower-case letters, digits, '.', '_' or '-' (1-63)", required=True, check=_name),
    "description": Field("str", "one line saying what the study compares", default=""),
    "model": Field(
        "map",
        "the model series every profile must serve",
        required=True,
        fields={
            "id": Field("str", REPO_ID_RULE, required=True, check=is_repo_id),
            "revision": Field("str", REVISION_RULE, required=True, check=is_revision),
            "quantization": Field("str", "the quantization, e.g. fp8 or none", required=True, check=_word),
            "max_model_len": Field("int", "the context in tokens", check=lambda v: 0 < v <= 10_000_000),
            "thinking": Field("str", '"on" or "off" (quoted)', check=lambda v: v in ("on", "off")),
        },
    ),
    "workloads": Field(
        "list",
        "a list of workloads: {name: chat-sweep, concurrency: [..], requests: N}",
        required=True,
        check=lambda v: 0 < len(v) <= 8,
        item=Field(
            "map",
            "a workload entry",
            fields={
                "name": Field("str", "a workload of the lab (labctl workloads)", required=True, check=_word),
                "concurrency": _LEVELS,
                "requests": Field("int", "measured requests per level, 1-100000", check=lambda v: 0 < v <= 100_000),
                "unlimited": Field("bool", "also one level with no arrival limit (open loop at once)", default=False),
            },
        ),
    ),
    "suites": Field(
        "list",
        "a list of quality suites: {name: coding, version: '1.1'}",
        default=list,
        check=lambda v: len(v) <= 8,
        item=Field(
            "map",
            "a suite entry",
            fields={
                "name": Field(
                    "str",
                    "a suite of the lab (labctl suites), or lm-eval:TASK for an lm-evaluation-harness task set",
                    required=True,
                    check=_suite_name,
                ),
                "version": Field("str", "the suite (or task set) version it must have, e.g. '1.1'", check=_word),
            },
        ),
    ),
    "slo": Field(
        "map",
        "bounds in ms, e.g. {ttft_ms: 500, tpot_ms: 50}",
        item=Field("float", "a bound in ms > 0", check=lambda v: 0 < v <= 3_600_000),
        check=lambda v: 0 < len(v) <= 4 and all(k in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms") for k in v),
    ),
    "repeats": Field("int", f"1-{MAX_REPEATS}", default=1, check=lambda v: 0 < v <= MAX_REPEATS),
    "environment": Field(
        "str",
        "the accelerator the study expects: gpu, simulated or cpu",
        required=True,
        check=lambda v: v in ACCELERATORS,
    ),
    "batch_caps_note": Field(
        "str",
        "why levels above an engine's batch cap are kept rather than the cap raised (the plan prints it; at most "
        f"{MAX_NOTE} characters)",
        check=lambda v: 0 < len(v) <= MAX_NOTE and all(c.isprintable() or c == "\n" for c in v),
    ),
    "max_error_rate": Field("float", "a share 0-1", default=0.1, check=lambda v: 0 <= v <= 1),
    "fetch": Field("bool", "download models before up (false: start from the cache as it is)", default=True),
    "allow_unpinned": Field("bool", "run profiles whose image is not pinned by digest", default=False),
    "timeout_s": Field("float", "seconds an up may wait for readiness", default=900.0, check=lambda v: 0 < v <= 86400),
    "drop_kv_bound": Field(
        "bool",
        "leave out the levels whose KV cache cannot hold every stream at once (default: run them, marked KV-bound)",
        default=False,
    ),
    "profiles": Field(
        "list",
        f"a list of 1-{MAX_PROFILES} entries: {{engine: vllm, profile: qwen3-32b, overrides: {{...}}}}",
        required=True,
        check=lambda v: 0 < len(v) <= MAX_PROFILES,
        item=Field(
            "map",
            "a profile entry",
            fields={
                "engine": Field("str", "an engine of the lab", required=True, check=_word),
                "profile": Field("str", "a profile of that engine", required=True, check=_word),
                "target_gpu": Field(
                    "str", f"the GPU the profile targets: {', '.join(TARGET_GPUS)}", check=lambda v: v in TARGET_GPUS
                ),
                "port": Field(
                    "int", "the engine's port (host i of the list uses port + i)", check=lambda v: 0 < v < 65000
                ),
                "only": Field("str", "a later integration step that owns this entry's test", check=_word),
                "overrides": Field(
                    "map",
                    f"a grid: {', '.join(OVERRIDE_KEYS)}, each a list of values",
                    default=dict,
                    check=lambda v: all(k in OVERRIDE_KEYS for k in v),
                    item=Field("list", f"a list of 1-{MAX_GRID} values", check=_grid_values),
                ),
            },
        ),
    ),
    "hosts": Field(
        "list",
        f"a list of 1-{MAX_HOSTS} host names (labctl hosts), or leave it out for the default host",
        default=list,
        check=lambda v: len(v) <= MAX_HOSTS and len(set(v)) == len(v),
        item=Field("str", "a host name", check=_name),
    ),
}


@dataclass(frozen=True)
class Entry:
    """One profile of the study and its grid of overrides."""

    engine: str
    profile: str
    target_gpu: str | None
    port: int | None
    only: str | None
    overrides: dict[str, list[Any]]


@dataclass(frozen=True)
class WorkloadEntry:
    name: str
    concurrency: tuple[int, ...] | None
    requests: int | None
    unlimited: bool


@dataclass(frozen=True)
class Study:
    name: str
    path: Path
    sha256: str  # the file's bytes
    source: SourceFile
    spec: dict[str, Any]

    @property
    def model(self) -> dict[str, Any]:
        return dict(self.spec["model"])

    @property
    def entries(self) -> list[Entry]:
        return [
            Entry(e["engine"], e["profile"], e["target_gpu"], e["port"], e["only"], dict(e["overrides"] or {}))
            for e in self.spec["profiles"]
        ]

    @property
    def workloads(self) -> list[WorkloadEntry]:
        return [
            WorkloadEntry(
                w["name"], tuple(w["concurrency"]) if w["concurrency"] else None, w["requests"], w["unlimited"]
            )
            for w in self.spec["workloads"]
        ]

    @property
    def suites(self) -> list[tuple[str, str | None]]:
        return [(s["name"], s["version"]) for s in self.spec["suites"]]

    @property
    def slo(self) -> dict[str, float] | None:
        return dict(self.spec["slo"]) if self.spec["slo"] else None

    @property
    def repeats(self) -> int:
        return int(self.spec["repeats"])

    @property
    def environment(self) -> str:
        return str(self.spec["environment"])

    @property
    def batch_caps_note(self) -> str | None:
        """Why the study keeps levels above a cap it does not raise."""
        note = self.spec["batch_caps_note"]
        return None if note is None else " ".join(str(note).split())

    @property
    def hosts(self) -> list[str]:
        return list(self.spec["hosts"])

    @property
    def drop_kv_bound(self) -> bool:
        return bool(self.spec["drop_kv_bound"])


def _check_overrides(src: SourceFile, spec: dict[str, Any]) -> None:
    for i, entry in enumerate(spec["profiles"]):
        for key, values in (entry["overrides"] or {}).items():
            for j, value in enumerate(values):
                where = ("profiles", i, "overrides", key, j)
                if key == "extra_args":
                    ok = isinstance(value, list) and len(value) <= 32 and all(isinstance(w, (str, int)) for w in value)
                    if not ok:
                        raise src.problem(where, "expected a list of argv words, e.g. ['--enable-prefix-caching'].")
                elif key == "gpu_memory_utilization":
                    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1:
                        raise src.problem(where, f"{value!r} is not allowed: expected a fraction in (0, 1].")
                elif not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= 1_000_000:
                    raise src.problem(where, f"{value!r} is not allowed: expected a whole number 1-1000000.")


def _check_size(src: SourceFile, spec: dict[str, Any]) -> None:
    """The (cell, repeat) count, multiplied out before any grid is expanded (a grid of 16^5 would take minutes)."""
    grids = [math.prod(len(v) for v in (entry["overrides"] or {}).values()) for entry in spec["profiles"]]
    hosts, repeats = max(len(spec["hosts"] or []), 1), spec["repeats"]
    total = sum(grids) * hosts * repeats
    if total > MAX_CELLS:
        products = " + ".join(str(g) for g in grids)
        raise src.problem(
            ("profiles",),
            f"the study asks for ({products}) grid cells x {hosts} host(s) x {repeats} repeat(s) = {total} "
            f"measured (cell, repeat)s, more than {MAX_CELLS}; split it into studies or shrink the overrides.",
        )


def load_study(path: Path) -> Study:
    """The study file, checked; a bad file raises one BadInput naming file, line and field."""
    src = load_yaml_mapping(path, display=str(path))
    spec = check_mapping(src, (), src.data, FIELDS)
    _check_overrides(src, spec)
    _check_size(src, spec)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Study(name=spec["study"], path=path.resolve(), sha256=digest, source=src, spec=spec)
