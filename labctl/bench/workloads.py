"""Workloads: fixed, hashed descriptions of what a benchmark sends (workloads/<name>.yaml)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from labctl.bench.prompts import Prompt, build_prompts
from labctl.bench.tokens import WORDS, Counter
from labctl.catalog.fields import Field, check_mapping, check_value
from labctl.catalog.hub_names import REPO_ID_RULE, REVISION_RULE, is_repo_id, is_revision
from labctl.catalog.lab import Lab, check_name
from labctl.catalog.limits import (
    MAX_CONCURRENCY,
    MAX_LEVELS,
    MAX_PROMPT_WORDS,
    MAX_RATE,
    MAX_REQUESTS,
    MAX_SLO_MS,
    MAX_TOKENS,
    MIN_RATE,
    check_count,
)
from labctl.catalog.sourcefile import SourceFile, load_yaml_mapping
from labctl.errors import BadInput

DATASET_KINDS = ("random", "shared-prefix", "multi-turn", "jsonl", "sharegpt", "trace")
LENGTH_KINDS = ("random", "shared-prefix", "multi-turn")
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")


_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_TOOLS = 128
MAX_TOOLS_BYTES = 256 * 1024  # sent with every request: larger tool lists are a mistake, not a workload
MAX_PREFIXES = 10_000
# max_tokens for recorded ShareGPT answers when the workload sets none: above any answer in ShareGPT_V3.
RECORDED_CAP = 16_384
MAX_TURNS = 100
# Path parts never start with '.', so neither '..' nor a hidden file; no leading '/', no backslash.
_DATASET_PATH = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*(?:/[A-Za-z0-9_-][A-Za-z0-9._-]*)*")


def _positive(v: Any) -> bool:
    return bool(v > 0)


_LEN_WHY = f"at most {MAX_TOKENS}: no served model has a longer context"
_MS_WHY = f"a number of ms > 0, at most {MAX_SLO_MS:.0f} (a day)"
_RATE_WHY = f"requests per second, {MIN_RATE:g} to {MAX_RATE:.0f} (open loop, gamma arrivals)"
RATE = Field("float", _RATE_WHY, check=lambda v: v >= MIN_RATE, high=MAX_RATE)
RATES = Field(
    "list", f"a list of 1 to {MAX_LEVELS} rates, e.g. [1, 2, 4]", check=lambda v: 0 < len(v) <= MAX_LEVELS, item=RATE
)

WORKLOAD_FIELDS: dict[str, Field] = {
    "description": Field("str", "one line saying what this workload measures", required=True),
    "dataset": Field(
        "map",
        required=True,
        fields={
            "kind": Field(
                "str", "one of " + ", ".join(DATASET_KINDS), required=True, check=lambda v: v in DATASET_KINDS
            ),
            "input_len": Field("int", f"prompt length in tokens (> 0, {_LEN_WHY})", check=_positive, high=MAX_TOKENS),
            "output_len": Field("int", f"output length in tokens (> 0, {_LEN_WHY})", check=_positive, high=MAX_TOKENS),
            "range_ratio": Field(
                "float",
                "a fraction in [0, 1): lengths drawn uniformly from [L(1-r), L(1+r)] (vLLM's rule)",
                default=0.0,
                check=lambda v: 0 <= v < 1,
            ),
            "prefix_len": Field(
                "int",
                f"shared-prefix: length of each shared prefix (> 0, {_LEN_WHY})",
                check=_positive,
                high=MAX_TOKENS,
            ),
            "prefix_count": Field(
                "int",
                f"shared-prefix: how many distinct prefixes the requests share, 1 to {MAX_PREFIXES}",
                check=_positive,
                high=MAX_PREFIXES,
            ),
            "turns": Field(
                "int", f"multi-turn: user turns per session, 2 to {MAX_TURNS}", check=lambda v: v >= 2, high=MAX_TURNS
            ),
            "think_time_s": Field(
                "float",
                "multi-turn: seconds a user pauses before each later turn, 0 to 3600 (default 0)",
                check=lambda v: v >= 0,
                high=3600.0,
            ),
            "recorded_output": Field(
                "bool",
                "sharegpt: ask for as many tokens as the recorded answer had (true, the default), or max_tokens",
            ),
            "path": Field(
                "str",
                "a dataset file inside the workloads folder, as a relative path such as data/prompts.jsonl "
                "(letters, digits, '.', '_', '-' and '/'; no '..', no absolute path)",
                check=lambda v: len(v) <= 255 and _DATASET_PATH.fullmatch(v) is not None,
            ),
            "speedup": Field(
                "float",
                "trace: replay the arrivals this many times faster (2 = twice the trace's rate), 0.001 to 1000",
                check=lambda v: v >= 0.001,
                high=1000.0,
            ),
            "repo": Field("str", "instead of path: " + REPO_ID_RULE + ", a Hub dataset repository", check=is_repo_id),
            "revision": Field(
                "str",
                "with repo: " + REVISION_RULE + "; `labctl pin --workload NAME` makes it a commit",
                check=is_revision,
            ),
            "file": Field(
                "str",
                "with repo: the file inside the dataset repository, e.g. ShareGPT_V3_unfiltered_cleaned_split.json "
                "(letters, digits, '.', '_', '-' and '/'; no '..', no absolute path)",
                check=lambda v: len(v) <= 255 and _DATASET_PATH.fullmatch(v) is not None,
            ),
        },
    ),
    "duration_s": Field(
        "float",
        "each level stops sending after this many seconds of measuring, 1 to 86400 (requests in flight finish); "
        "its requests stay the most it sends",
        check=lambda v: v >= 1,
        high=86400.0,
    ),
    "ramp_up_s": Field(
        "float",
        "seconds over which each level's load rises, 0 to 3600: closed loop starts its streams one by one over "
        "them, open loop raises its arrival rate linearly to the target over them",
        check=lambda v: v >= 0,
        high=3600.0,
    ),
    "repeat_prompts": Field(
        "bool",
        "send a prompt more than once on purpose when the dataset holds fewer distinct prompts than the bench "
        "sends (recorded in the result; an engine's prefix cache then serves the repeats)",
    ),
    "requests_per_concurrency": Field(
        "int",
        f"measured requests per level = this × concurrency (> 0; at most {MAX_REQUESTS} requests per level, "
        "about three hours at 10 req/s)",
        check=_positive,
        high=MAX_REQUESTS,
    ),
    "requests": Field(
        "int",
        f"measured requests per level (> 0, at most {MAX_REQUESTS}: about three hours at 10 req/s)",
        check=_positive,
        high=MAX_REQUESTS,
    ),
    "concurrency": Field(
        "list",
        f"a list of 1 to {MAX_LEVELS} concurrency levels, e.g. [1, 8, 64]",
        required=True,
        check=lambda v: 0 < len(v) <= MAX_LEVELS,
        item=Field(
            "int",
            f"a whole number > 0, at most {MAX_CONCURRENCY} (one connection each)",
            check=_positive,
            high=MAX_CONCURRENCY,
        ),
    ),
    "request_rate": Field(
        "any",
        _RATE_WHY + ", or a list of up to " + str(MAX_LEVELS) + " such rates (a rate sweep)",
        check=lambda v: isinstance(v, (int, float, list)) and not isinstance(v, bool),
    ),
    "burstiness": Field(
        "float",
        "gamma shape of the arrival gaps (1 = Poisson), 0.01 to 100 (outside that the gaps are all or nothing)",
        default=1.0,
        check=lambda v: v >= 0.01,
        high=100.0,
    ),
    "tools": Field(
        "list",
        f"1 to {MAX_TOOLS} OpenAI tool definitions sent with every chat request "
        "({type: function, function: {name, description, parameters}})",
        check=lambda v: 0 < len(v) <= MAX_TOOLS,
        item=Field(
            "map",
            fields={
                "type": Field("str", "function", required=True, check=lambda v: v == "function"),
                "function": Field(
                    "map",
                    required=True,
                    fields={
                        "name": Field(
                            "str",
                            "1 to 64 letters, digits, '_' or '-' (OpenAI's rule)",
                            required=True,
                            check=lambda v: _TOOL_NAME.fullmatch(v) is not None,
                        ),
                        "description": Field("str", "at most 1024 characters", check=lambda v: len(v) <= 1024),
                        "parameters": Field("any", "a JSON schema object", check=lambda v: isinstance(v, dict)),
                        "strict": Field("bool"),
                    },
                ),
            },
        ),
    ),
    "tool_choice": Field("str", "auto, none or required", check=lambda v: v in ("auto", "none", "required")),
    "max_tokens": Field(
        "int", f"max_tokens sent (> 0, {_LEN_WHY}; default: the output length)", check=_positive, high=MAX_TOKENS
    ),
    "ignore_eos": Field("bool", default=True),
    "temperature": Field("float", "a number in [0, 2]", default=0.0, check=lambda v: 0 <= v <= 2),
    "seed": Field("int", "a whole number", default=0),
    "warmup_per_concurrency": Field(
        "int",
        f"warm-up requests per level = this × concurrency (>= 0, at most {MAX_REQUESTS} per level), excluded",
        default=1,
        check=lambda v: v >= 0,
        high=MAX_REQUESTS,
    ),
    "endpoint": Field("str", "chat or completions", default="chat", check=lambda v: v in ("chat", "completions")),
    "stream": Field("bool", default=True),
    "slo": Field(
        "map",
        "SLOs for goodput, in ms",
        fields={
            "ttft_ms": Field("float", _MS_WHY, check=_positive, high=MAX_SLO_MS),
            "tpot_ms": Field("float", _MS_WHY, check=_positive, high=MAX_SLO_MS),
            "e2e_ms": Field("float", _MS_WHY, check=_positive, high=MAX_SLO_MS),
        },
    ),
}


@dataclass(frozen=True)
class Workload:
    name: str
    spec: dict[str, Any]
    folder: Path
    overrides: tuple[tuple[str, Any], ...] = ()  # (flag, value) applied on top of the file, in order
    file_sha256: str | None = None  # the file's own hash when overrides changed it
    counter: Counter = WORDS  # how lengths are counted: the model's tokenizer, or words (not part of the spec)

    @property
    def sha256(self) -> str:
        return spec_sha256(self.spec)

    @property
    def description(self) -> str:
        return str(self.spec["description"])

    @property
    def concurrency(self) -> tuple[int, ...]:
        return tuple(int(c) for c in self.spec["concurrency"])

    @property
    def endpoint(self) -> str:
        """chat or completions."""
        return str(self.spec["endpoint"])

    @property
    def dataset_kind(self) -> str:
        return str(self.spec["dataset"]["kind"])

    @property
    def hub_dataset(self) -> tuple[str, str, str] | None:
        """(repository, revision, file) when the dataset comes from the Hub."""
        dataset = self.spec["dataset"]
        if dataset.get("repo") is None:
            return None
        return str(dataset["repo"]), str(dataset["revision"]), str(dataset["file"])

    @property
    def repeats_prompts(self) -> bool:
        """The workload sends a prompt more than once on purpose (said in its file)."""
        return bool(self.spec.get("repeat_prompts"))

    @property
    def slo(self) -> dict[str, float] | None:
        """Goodput's service-level objective (metric -> bound), when the workload states one."""
        slo = self.spec["slo"]
        return None if not slo else {str(k): float(v) for k, v in slo.items()}

    @property
    def seed(self) -> int:
        return int(self.spec["seed"])

    @property
    def burstiness(self) -> float:
        return float(self.spec["burstiness"])

    def requests_for(self, concurrency: int) -> int:
        if self.spec["requests"]:
            return int(self.spec["requests"])
        return int(self.spec["requests_per_concurrency"]) * concurrency

    def warmup_for(self, concurrency: int) -> int:
        return int(self.spec["warmup_per_concurrency"]) * concurrency

    def rates(self) -> list[float | None]:
        """None is closed loop (as fast as the concurrency allows)."""
        rate = self.spec["request_rate"]
        return list(rate) if isinstance(rate, list) else [rate]

    def levels(self) -> list[tuple[int, float | None]]:
        """Every (concurrency, rate) pair, concurrency outermost; with rates, concurrency caps requests in flight."""
        return [(c, r) for c in self.concurrency for r in self.rates()]

    def at_rate(self, rate: float | None) -> Workload:
        """The same workload with one arrival rate: what one level runs."""
        return replace(self, spec=self.spec | {"request_rate": rate})

    def with_counter(self, counter: Counter) -> Workload:
        return replace(self, counter=counter)

    def describe_overrides(self) -> str:
        return " ".join(f"{flag} {_flag_value(value)}" for flag, value in self.overrides)


def _flag_value(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_flag_value(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={_flag_value(v)}" for k, v in value.items())
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# Fields added after workloads were first hashed: left out of the hash while unset, so a workload that
# does not use them keeps the hash its earlier results were stored under.
LATER_FIELDS = {"tools", "tool_choice", "repeat_prompts", "duration_s", "ramp_up_s"}
LATER_DATASET_FIELDS = {
    "prefix_len",
    "prefix_count",
    "turns",
    "think_time_s",
    "recorded_output",
    "repo",
    "revision",
    "file",
    "speedup",
}


def spec_sha256(spec: dict[str, Any]) -> str:
    hashed = {k: v for k, v in spec.items() if not (k in LATER_FIELDS and v is None)}
    if isinstance(spec.get("dataset"), dict):
        dataset = spec["dataset"]
        hashed["dataset"] = {k: v for k, v in dataset.items() if not (k in LATER_DATASET_FIELDS and v is None)}
    return hashlib.sha256(json.dumps(hashed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def check_workload(src: SourceFile, data: dict[str, Any]) -> dict[str, Any]:
    spec = check_mapping(src, (), data, WORKLOAD_FIELDS)
    if spec["request_rate"] is not None:
        rate_field = RATES if isinstance(spec["request_rate"], list) else RATE
        spec["request_rate"] = check_value(src, ("request_rate",), spec["request_rate"], rate_field)
    dataset = spec["dataset"]
    _check_dataset(src, spec)
    if spec["requests"] is None and spec["requests_per_concurrency"] is None and dataset["kind"] != "trace":
        spec["requests_per_concurrency"] = 10
    if spec["requests"] is not None and spec["requests_per_concurrency"] is not None:
        raise src.problem(("requests",), "give requests or requests_per_concurrency, not both.")
    if dataset["kind"] == "trace" and spec["requests"] is None:
        raise src.problem(
            ("requests",),
            "a trace needs requests: N, the number of its first arrivals each level replays (its timestamps set "
            "when each is sent).",
        )
    if spec["max_tokens"] is None:
        recorded = dataset["kind"] in ("sharegpt", "trace") and dataset["recorded_output"] is not False
        spec["max_tokens"] = dataset["output_len"] or (RECORDED_CAP if recorded else 256)
    if spec["slo"] is not None:
        spec["slo"] = {k: v for k, v in spec["slo"].items() if v is not None}
    problem = levels_problem(spec)
    if problem:
        raise src.problem(("request_rate",) if spec["request_rate"] is not None else ("concurrency",), problem)
    problem = budget_problem(spec)
    if problem:
        raise src.problem(("requests",) if spec["requests"] is not None else ("requests_per_concurrency",), problem)
    return spec


NEEDS = {
    "random": ("input_len", "output_len"),
    "shared-prefix": ("input_len", "output_len", "prefix_len", "prefix_count"),
    "multi-turn": ("input_len", "output_len", "turns"),
    "jsonl": (),
    "sharegpt": (),
    "trace": (),
}
ONLY = {
    "prefix_len": "shared-prefix",
    "prefix_count": "shared-prefix",
    "turns": "multi-turn",
    "path": "jsonl or sharegpt or trace",
    "repo": "jsonl or sharegpt or trace",
    "revision": "jsonl or sharegpt or trace",
    "file": "jsonl or sharegpt or trace",
    "speedup": "trace",
}
HUB_KEYS = ("repo", "revision", "file")


def _check_dataset(src: SourceFile, spec: dict[str, Any]) -> None:
    dataset = spec["dataset"]
    kind = dataset["kind"]
    for key in NEEDS[kind]:
        if dataset[key] is None:
            raise src.problem(("dataset",), f"a {kind} dataset needs {key}.")
    for key, kinds in ONLY.items():
        if dataset[key] is not None and kind not in kinds.split(" or "):
            raise src.problem(("dataset", key), f"{key} belongs to {kinds} datasets, not {kind}.")
    if kind in ("jsonl", "sharegpt", "trace"):
        hub = [k for k in HUB_KEYS if dataset[k] is not None]
        if dataset["path"] is not None and hub:
            raise src.problem(
                ("dataset", hub[0]), "give path (a file in the lab) or repo, revision and file, not both."
            )
        if dataset["path"] is None and len(hub) < len(HUB_KEYS):
            lacking = ", ".join(k for k in HUB_KEYS if dataset[k] is None)
            raise src.problem(
                ("dataset",),
                f"a {kind} dataset needs path (a file in the lab) or repo, revision and file: no {lacking}.",
            )
    if kind == "trace" and spec["request_rate"] is not None:
        raise src.problem(
            ("request_rate",), "a trace sets its own arrival times (open loop, its timestamps): drop request_rate."
        )
    if kind == "trace" and spec["ramp_up_s"]:
        raise src.problem(("ramp_up_s",), "a trace sets its own arrival times: drop ramp_up_s (or use speedup).")
    if kind == "multi-turn":
        if spec["request_rate"] is not None:
            raise src.problem(
                ("request_rate",),
                "multi-turn sessions run closed loop (concurrency = sessions at once): drop request_rate.",
            )
        if spec["endpoint"] != "chat":
            raise src.problem(("endpoint",), "multi-turn sessions need endpoint: chat (a conversation is messages).")
        context = dataset["turns"] * (dataset["input_len"] + dataset["output_len"])
        if context > MAX_TOKENS:
            raise src.problem(
                ("dataset", "turns"),
                f"turns × (input_len + output_len) = {context}: a session's last turn would "
                f"carry more than {MAX_TOKENS} tokens; fewer turns or shorter turns.",
            )
    if spec["tools"] is not None:
        if spec["endpoint"] != "chat":
            raise src.problem(("tools",), "tools are sent with chat requests only: endpoint: chat.")
        size = len(json.dumps(spec["tools"]))
        if size > MAX_TOOLS_BYTES:
            raise src.problem(("tools",), f"{size} bytes of tool definitions: at most {MAX_TOOLS_BYTES} per request.")
        spec["tools"] = [_drop_nulls(t) for t in spec["tools"]]
    if spec["tool_choice"] is not None and spec["tools"] is None:
        raise src.problem(("tool_choice",), "tool_choice needs tools.")


def _drop_nulls(value: Any) -> Any:
    """Fields left out stay out of what is sent (a null description is not OpenAI's)."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    return value


def levels_problem(spec: dict[str, Any]) -> str | None:
    rates = spec["request_rate"] if isinstance(spec["request_rate"], list) else [spec["request_rate"]]
    count = len(spec["concurrency"]) * len(rates)
    if count > MAX_LEVELS:
        return (
            f"{len(spec['concurrency'])} concurrency levels × {len(rates)} request rates make {count} levels: "
            f"at most {MAX_LEVELS} (an afternoon's sweep); drop some."
        )
    return None


def budget_problem(spec: dict[str, Any]) -> str | None:
    """What one level would hold in memory and send, within the bounds each number has alone."""
    top = max(spec["concurrency"])
    requests = spec["requests"] or spec["requests_per_concurrency"] * top
    warmup = spec["warmup_per_concurrency"] * top
    for what, count in (("measured requests", requests), ("warm-up requests", warmup)):
        if count > MAX_REQUESTS:
            return (
                f"{count} {what} at concurrency {top}: at most {MAX_REQUESTS} per level "
                "(about three hours at 10 req/s); lower the count or the concurrency."
            )
    dataset = spec["dataset"]
    per_request = {
        "random": lambda d: math.ceil(d["input_len"] * (1 + d["range_ratio"])),
        "shared-prefix": lambda d: d["input_len"],
        "multi-turn": lambda d: d["input_len"] + d["output_len"],
    }.get(dataset["kind"])
    if per_request is not None:
        words = max(requests, warmup) * per_request(dataset)
        if dataset["kind"] == "shared-prefix":
            words += dataset["prefix_count"] * dataset["prefix_len"]
        if words > MAX_PROMPT_WORDS:
            return (
                f"{words} prompt words per level ({max(requests, warmup)} requests × their length): at most "
                f"{MAX_PROMPT_WORDS} (~400 MB of text held in memory); lower requests or the lengths."
            )
    return None


def load_workload(lab: Lab, name: str) -> Workload:
    check_name(name, "workload")
    path = lab.inside(lab.workloads_dir / f"{name}.yaml")
    if not path.is_file():
        known = ", ".join(list_workloads(lab)) or "none"
        raise BadInput(f"unknown workload {name!r}. Workloads in {lab.workloads_dir}: {known}.")
    src = load_yaml_mapping(path, display=str(path.relative_to(lab.root)))
    return Workload(name=name, spec=check_workload(src, src.data), folder=lab.workloads_dir)


def list_workloads(lab: Lab) -> list[str]:
    return sorted(p.stem for p in lab.workloads_dir.glob("*.yaml")) if lab.workloads_dir.is_dir() else []


def with_overrides(
    workload: Workload,
    concurrency: list[int] | None = None,
    requests: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    request_rate: list[float] | None = None,
    slo: dict[str, float] | None = None,
) -> Workload:
    """The workload with flags applied; each flag used is kept, in order, so output and result can name it."""
    spec = json.loads(json.dumps(workload.spec))
    applied: list[tuple[str, Any]] = []
    if concurrency:
        if any(not 0 < c <= MAX_CONCURRENCY for c in concurrency) or len(concurrency) > MAX_LEVELS:
            raise BadInput(
                f"--concurrency: every level must be a whole number from 1 to {MAX_CONCURRENCY} (one connection "
                f"each), at most {MAX_LEVELS} levels, e.g. --concurrency 1,8,64."
            )
        spec["concurrency"] = concurrency
        applied.append(("--concurrency", concurrency))
    if request_rate:
        if len(request_rate) > MAX_LEVELS or any(
            not (math.isfinite(r) and MIN_RATE <= r <= MAX_RATE) for r in request_rate
        ):
            raise BadInput(
                f"--request-rate: every rate must be a number of requests per second from {MIN_RATE:g} to "
                f"{MAX_RATE:.0f}, at most {MAX_LEVELS} rates, e.g. --request-rate 1,2,4."
            )
        if spec["dataset"]["kind"] == "multi-turn":
            raise BadInput("--request-rate: multi-turn sessions run closed loop (concurrency = sessions at once).")
        spec["request_rate"] = request_rate if len(request_rate) > 1 else request_rate[0]
        applied.append(("--request-rate", request_rate))
    if requests is not None:
        if requests <= 0:
            raise BadInput(f"--requests {requests}: give a number of requests > 0.")
        check_count("--requests", requests, MAX_REQUESTS, "measured requests per level; about three hours at 10 req/s")
        spec["requests"], spec["requests_per_concurrency"] = requests, None
        applied.append(("--requests", requests))
    if input_len is not None or output_len is not None:
        if spec["dataset"]["kind"] not in LENGTH_KINDS:
            raise BadInput("--input-len/--output-len apply to datasets of kind " + ", ".join(LENGTH_KINDS) + " only.")
        for key, value in (("input_len", input_len), ("output_len", output_len)):
            if value is not None:
                if value <= 0:
                    raise BadInput(f"--{key.replace('_', '-')} {value}: give a length > 0.")
                check_count(f"--{key.replace('_', '-')}", value, MAX_TOKENS, "no served model has a longer context")
                spec["dataset"][key] = value
                applied.append((f"--{key.replace('_', '-')}", value))
        if output_len is not None:
            spec["max_tokens"] = output_len
    if slo is not None:
        spec["slo"] = slo
        applied.append(("--slo", slo))
    problem = levels_problem(spec) or budget_problem(spec)
    if problem:
        raise BadInput(f"with the flags as given: {problem}")
    if not applied:
        return workload
    return Workload(
        name=workload.name,
        spec=spec,
        folder=workload.folder,
        overrides=tuple(applied),
        file_sha256=workload.file_sha256 or workload.sha256,
    )


def parse_slo(text: str) -> dict[str, float]:
    """`ttft_ms=500,tpot_ms=50`: each key once, each a number of ms within the workload file's bounds."""
    slo: dict[str, float] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        key = key.strip()
        if key not in SLO_KEYS or key in slo:
            raise BadInput(
                f"--slo {text[:80]!r}: expected KEY=MS pairs separated by commas, each key once, keys "
                f"{', '.join(SLO_KEYS)}; e.g. --slo ttft_ms=500,tpot_ms=50."
            )
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and 0 < number <= MAX_SLO_MS):
            raise BadInput(f"--slo {key}={value[:20]}: give a number of ms > 0, at most {MAX_SLO_MS:.0f} (a day).")
        slo[key] = number
    return slo


def make_prompts(workload: Workload, count: int, salt: int, start: int = 0, path: Path | None = None) -> list[Prompt]:
    """Deterministic from the workload's seed; `salt` keeps synthetic stretches distinct, `start` is where a
    dataset stretch begins (labctl.bench.prompt_slots lays both out, and finds a Hub dataset's `path`)."""
    return build_prompts(workload.spec, workload.name, workload.folder, workload.counter, count, salt, start, path)
