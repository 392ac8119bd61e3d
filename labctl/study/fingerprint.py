"""What a (cell, repeat) measured with: a result is reused only when every field still matches, and a
changed field is named, never reused silently."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

FIELDS = ("cell", "repeat", "image", "argv", "model_revision", "workloads", "suites", "client", "host_gpu")


@dataclass(frozen=True)
class Fingerprint:
    fields: dict[str, Any]

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.fields, sort_keys=True).encode()).hexdigest()

    def changed(self, stored: dict[str, Any] | None) -> list[str]:
        """The fields that differ from a stored fingerprint (all of them when there is none)."""
        if not isinstance(stored, dict):
            return list(FIELDS)
        return [name for name in FIELDS if stored.get(name) != self.fields.get(name)]


def argv_hash(entrypoint: list[str], words: list[str]) -> str:
    return hashlib.sha256(json.dumps([entrypoint, words]).encode()).hexdigest()[:16]


def make_fingerprint(
    cell: str,
    repeat: int,
    image: str,
    argv: str,
    model_revision: str,
    workloads: dict[str, str],
    suites: dict[str, str],
    client: str,
    host_gpu: str,
) -> Fingerprint:
    return Fingerprint(
        {
            "cell": cell,
            "repeat": repeat,
            "image": image,
            "argv": argv,
            "model_revision": model_revision,
            "workloads": dict(sorted(workloads.items())),
            "suites": dict(sorted(suites.items())),
            "client": client,
            "host_gpu": host_gpu,
        }
    )
