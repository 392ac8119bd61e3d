"""How prep parts read for people (`show`, `compare`, `report`) and what a comparison checks of them."""

from __future__ import annotations

from labctl.run.records.prep import PREP_PARTS, PrepPart

CACHEABLE = {"image_pull": "pull", "model_fetch": "fetch", "engine_build": "build"}  # the parts a cache can serve


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def part_text(part: PrepPart) -> str:
    words = [f"{part.seconds:g} s"]
    if part.bytes is not None:
        words.append(f"{size(part.bytes)} transferred")
    if part.cached is not None:
        words.append("cached" if part.cached else "not cached")
    return ", ".join(words) + (f"  ({part.detail})" if part.detail else "")


def prep_rows(prep: dict[str, PrepPart]) -> list[tuple[str, str]]:
    return [(f"prep {name}", part_text(prep[name])) for name in PREP_PARTS if name in prep]


def cache_state(prep: dict[str, PrepPart]) -> str:
    """What a cache served, e.g. 'pull cached, fetch cold, build -': two runs whose prep
    differs here were a warm and a cold start, and their prep times do not compare."""
    if not prep:
        return "not recorded"

    def word(name: str) -> str:
        part = prep.get(name)
        if part is None or part.cached is None:
            return "-"
        return "cached" if part.cached else "cold"

    return ", ".join(f"{short} {word(name)}" for name, short in CACHEABLE.items())


def seconds(prep: dict[str, PrepPart], name: str) -> float | None:
    part = prep.get(name)
    return None if part is None else part.seconds


def own_time_text(parts: dict[str, float], poll_gap: float | None) -> str:
    """labctl's own time in an up, for `show`: `0.41 s: plan 0.05, docker checks 0.12, ...`."""
    shown = ", ".join(f"{name} {seconds:g}" for name, seconds in parts.items())
    polled = f"; the engine's readiness noticed within {poll_gap:g} s" if poll_gap is not None else ""
    return f"{round(sum(parts.values()), 3):g} s ({shown}){polled}"
