"""Preparation cost in parts: each part of getting an engine ready, timed apart, and whether a cache served it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PrepPart:
    seconds: float
    bytes: int | None = None
    cached: bool | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "bytes": self.bytes, "cached": self.cached, "detail": self.detail}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PrepPart:
        return cls(
            seconds=float(data["seconds"]),
            bytes=None if data.get("bytes") is None else int(data["bytes"]),
            cached=None if data.get("cached") is None else bool(data["cached"]),
            detail=str(data.get("detail") or ""),
        )


PREP_PARTS = ("queue_wait", "image_pull", "model_fetch", "engine_build", "engine_load", "warmup", "first_completion")
