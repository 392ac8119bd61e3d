"""Telemetry during a benchmark, summarised per level: mean and max of gauges, the increase and rate of
counters, within each level's measured windows; a fraction (averaged over the engine's ranks) keeps its
busiest rank beside. The names and parsers live in catalog/engine_metrics.py."""

from __future__ import annotations

import statistics
from typing import Any

from labctl.catalog.engine_metrics import GPU_FIELDS, RANK_MAX, RANKS


def _gauge(values: list[float]) -> dict[str, float] | None:
    return {"mean": statistics.fmean(values), "max": max(values)} if values else None


def _busiest(values: list[dict[str, float]], common: str) -> dict[str, float]:
    """The busiest rank's most over the samples, and the most ranks one sample had (a sample written before
    ranks were kept counts as one, its value its own)."""
    return {
        RANK_MAX: max(v.get(f"{common}.{RANK_MAX}", v[common]) for v in values),
        RANKS: max(v.get(f"{common}.{RANKS}", 1.0) for v in values),
    }


Window = tuple[float, float]


def _within(t: float, windows: list[Window]) -> bool:
    return any(start <= t <= end for start, end in windows)


def _bracket(samples: list[dict[str, Any]], start: float, end: float) -> list[dict[str, Any]]:
    """The last sample at or before the window's start and the first at or after its end (the bench takes one
    just before each level and just after it, labctl.host.engine.sampler.Sampler.mark): a counter's rise
    between them is the window's, plus the level's warm-up."""
    ordered = sorted(samples, key=lambda s: float(s["t"]))  # the loop's and the bench's samples interleave
    before = [s for s in ordered if s["t"] <= start]
    after = [s for s in ordered if s["t"] >= end]
    return [before[-1], after[0]] if before and after else []


def summarise_engine(samples: list[dict[str, Any]], kinds: dict[str, str], windows: list[Window]) -> dict[str, Any]:
    """Engine samples ({"t": monotonic s, "values": {common: v}}) within the level's measured windows
    (one per repeat): gauges -> mean/max; fractions -> mean/max of the rank average, with the busiest
    rank's most (`rank_max`) and the ranks seen; counters -> increase (summed over windows) and per-second
    rate; ratios -> increase of num / increase of den (a window with fewer than two samples inside reads the two
    that bracket it)."""
    out: dict[str, Any] = {"samples": sum(1 for s in samples if _within(s["t"], windows))}
    for common, kind in kinds.items():
        if kind in ("gauge", "fraction"):
            inside = [s["values"] for s in samples if _within(s["t"], windows) and common in s["values"]]
            out[common] = _gauge([v[common] for v in inside])
            if kind == "fraction" and out[common] is not None:
                out[common] |= _busiest(inside, common)
            continue
        keys = (common, common) if kind == "counter" else (f"{common}.num", f"{common}.den")
        rise, span, den = 0.0, 0.0, 0.0
        for start, end in windows:
            points = [s for s in samples if start <= s["t"] <= end and keys[0] in s["values"]]
            if len(points) < 2:  # a level shorter than the scrape interval: the samples that bracket it
                points = _bracket([s for s in samples if keys[0] in s["values"]], start, end)
            if len(points) < 2:
                continue
            rise += max(0.0, points[-1]["values"][keys[0]] - points[0]["values"][keys[0]])
            den += max(0.0, points[-1]["values"][keys[1]] - points[0]["values"][keys[1]])
            span += points[-1]["t"] - points[0]["t"]
        if span <= 0:
            out[common] = None
        elif kind == "counter":
            out[common] = {"increase": rise, "per_s": rise / span}
        else:
            out[common] = {"mean": rise / den, "max": None} if den > 0 else None
    return out


def summarise_gpus(samples: list[dict[str, Any]], windows: list[Window]) -> dict[str, Any]:
    """GPU samples ({"t", "gpus": [row, ...]}) within the windows -> per GPU index, mean/max of each field."""
    inside = [s for s in samples if _within(s["t"], windows)]
    by_gpu: dict[str, dict[str, list[float]]] = {}
    names: dict[str, str] = {}
    for sample in inside:
        for row in sample["gpus"]:
            names[row["index"]] = row["name"]
            fields = by_gpu.setdefault(row["index"], {k: [] for k in GPU_FIELDS})
            for key in GPU_FIELDS:
                if row.get(key) is not None:
                    fields[key].append(row[key])
    return {
        "samples": len(inside),
        "gpus": {
            index: {"name": names[index], **{k: _gauge(v) for k, v in fields.items()}}
            for index, fields in sorted(by_gpu.items())
        },
    }


def peak_in_flight(samples: list[dict[str, Any]], windows: list[Window]) -> float | None:
    """The most requests the engine held (running + waiting) in one sample within the windows; None when the
    engine exports neither gauge."""
    peaks = [
        sum(s["values"].get(name, 0.0) for name in ("running", "waiting"))
        for s in samples
        if _within(s["t"], windows) and ("running" in s["values"] or "waiting" in s["values"])
    ]
    return max(peaks) if peaks else None
