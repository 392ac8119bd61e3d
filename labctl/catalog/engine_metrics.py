"""What telemetry sources say, parsed: each engine's own Prometheus names mapped to common ones, a
scrape parsed, and nvidia-smi's query lines read. Pure; the sampler beside it polls the sources.

Each engine's names, and where they were read, are in its folder (engines/NAME/engine.yaml `telemetry`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# kv_cache_usage_fraction: 0 to 1 as every engine exports it (vLLM's `_perc` is a fraction too); people see %
COMMON = (
    "running",
    "waiting",
    "kv_cache_usage_fraction",
    "preemptions",
    "prefix_cache_hit_rate",
    "generation_tokens",
)
LEGACY_NAMES = {"kv_cache_usage_fraction": "kv_cache_usage"}  # as results written before the rename say it
GPU_FIELDS = ("utilization_gpu_pct", "memory_used_mib", "power_draw_w", "clocks_sm_mhz")
# The nvidia-smi query: one line per GPU, plain numbers ([N/A] where a GPU has none, e.g. GB10 memory).
GPU_QUERY = "index,name,utilization.gpu,memory.used,power.draw,clocks.sm"
MAX_SCRAPE_BYTES = 4 * 1024 * 1024  # vLLM's /metrics with every histogram is ~100 KiB


# Common names whose value is a share (0 to 1) of one rank's capacity: an engine's plain gauge for one of them
# is declared `kind: fraction`, averaged over ranks, never summed (the engine folders are checked against it).
FRACTIONS = ("kv_cache_usage_fraction", "prefix_cache_hit_rate")


@dataclass(frozen=True)
class Source:
    """One engine metric feeding a common one. `per` names a second counter: the common value is
    the ratio of their increases (vLLM's prefix-cache hits per queried token)."""

    metric: str
    kind: str  # gauge (a count: summed over ranks) | counter (summed) | fraction (averaged over ranks)
    per: str | None = None


PROMETHEUS_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,127}")  # fullmatch
METRIC_KINDS = ("gauge", "counter", "fraction")
RANK_MAX, RANKS = "rank_max", "ranks"  # beside a fraction: its busiest series, and how many series there were
DEFAULT_METRICS_PATH = "/metrics"
# common name -> candidates, first present wins
MetricNames = Mapping[str, tuple[Source, ...]]


@dataclass(frozen=True)
class Telemetry:
    """What the lab's engines export: each one's metric names and the route that serves them."""

    names: Mapping[str, MetricNames] = field(default_factory=dict)
    paths: Mapping[str, str] = field(default_factory=dict)

    def path_of(self, engine: str) -> str:
        return self.paths.get(engine, DEFAULT_METRICS_PATH)


_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(?:\s+\S+)?\Z")
_TYPE = re.compile(r"#\s*TYPE\s+([a-zA-Z_:][a-zA-Z0-9_:]*)\s+(\w+)")


@dataclass(frozen=True)
class Series:
    """One metric's values over its label sets (engines label by model and, with data parallelism, by engine
    index: one value per rank), and the type its `# TYPE` line says (None: the scrape has none)."""

    values: tuple[float, ...]
    type: str | None = None

    @property
    def total(self) -> float:
        return math.fsum(self.values)

    def combined(self, kind: str) -> float:
        """The server's value: counts and counters summed over ranks; a fraction averaged (a counter by its
        `# TYPE` line is summed whatever the folder says)."""
        if kind == "fraction" and self.type != "counter":
            return self.total / len(self.values)
        return self.total


Scrape = dict[str, Series]


def parse_prometheus(text: str) -> Scrape:
    """Metric name -> its series over the label sets, with its `# TYPE`. Histogram series are skipped."""
    values: dict[str, list[float]] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("#"):
            declared = _TYPE.match(line)
            if declared is not None:
                types[declared.group(1)] = declared.group(2)
            continue
        match = _SAMPLE.match(line.strip())
        if match is None:
            continue
        name = match.group(1)
        if name.endswith(("_bucket", "_sum", "_count", "_created")):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            values.setdefault(name, []).append(value)
    return {name: Series(tuple(found), types.get(name)) for name, found in values.items()}


def engine_of(values: Scrape, hint: str | None, tables: Mapping[str, MetricNames]) -> str | None:
    """The engine whose names this scrape carries: the run's engine when it matches, else by prefix
    (an endpoint labctl did not start, or the harness engine wearing a persona)."""
    if hint is not None and hint in tables and any(s.metric in values for c in tables[hint].values() for s in c):
        return hint
    for engine, table in tables.items():
        if any(s.metric in values for candidates in table.values() for s in candidates):
            return engine
    return None


def map_metrics(names: MetricNames, values: Scrape) -> dict[str, float]:
    """One scrape under the common names. A ratio source keeps both counters (`NAME.num`, `NAME.den`)
    so the summary can divide their increases over a level; a fraction keeps its busiest rank
    (`NAME.rank_max`) and the number of ranks (`NAME.ranks`) beside the mean."""
    out: dict[str, float] = {}
    for common, candidates in names.items():
        for source in candidates:
            if source.metric not in values:
                continue
            if source.per is not None:
                if source.per not in values:
                    continue
                out[f"{common}.num"], out[f"{common}.den"] = values[source.metric].total, values[source.per].total
            else:
                series = values[source.metric]
                out[common] = series.combined(source.kind)
                if source.kind == "fraction" and series.type != "counter":
                    out[f"{common}.{RANK_MAX}"], out[f"{common}.{RANKS}"] = max(series.values), len(series.values)
            break
    return out


def mapping_used(names: MetricNames, values: Scrape) -> dict[str, str | None]:
    """Common name -> the engine's own name it came from (None: the engine does not export it)."""
    used: dict[str, str | None] = {}
    for common, candidates in names.items():
        found = next((s for s in candidates if s.metric in values and (s.per is None or s.per in values)), None)
        used[common] = None if found is None else (found.metric + (f" / {found.per}" if found.per else ""))
    return used


def kind_of(names: MetricNames, common: str, values: Scrape) -> str | None:
    for source in names.get(common, ()):
        if source.metric in values:
            if source.per:
                return "ratio"
            return "counter" if values[source.metric].type == "counter" else source.kind
    return None


def parse_gpu_lines(text: str) -> list[dict[str, Any]]:
    """nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits -> one dict per GPU;
    [N/A] (or anything not a number) becomes None."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 6 or not parts[0].isdigit():
            continue
        row: dict[str, Any] = {"index": parts[0], "name": parts[1][:96], "simulated": parts[1].startswith("Simulated ")}
        for key, raw in zip(GPU_FIELDS, parts[2:], strict=True):
            try:
                number = float(raw)
            except ValueError:
                number = math.nan
            row[key] = number if math.isfinite(number) else None
        rows.append(row)
    return rows
