"""labctl's own time in an `up`, by part, beside the engine's: what a cold start costs that no engine needed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class OwnTime:
    """Seconds by part; a part entered twice adds up."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = {}

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - started)

    def add(self, name: str, seconds: float) -> None:
        self.parts[name] = round(self.parts.get(name, 0.0) + max(seconds, 0.0), 3)

    def total(self) -> float:
        return round(sum(self.parts.values()), 3)
