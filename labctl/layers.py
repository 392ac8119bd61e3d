"""The package's layers, lowest first: the import rule tests/test_architecture.py checks and the architecture page shows."""

from __future__ import annotations

# A package imports only from packages below it; packages on one line never import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("catalog",),
    ("host",),
    ("compose",),
    ("run.records",),
    ("run.remote",),
    ("run.images", "run.models", "run.resident"),
    ("run.lifecycle",),
    ("run.backends",),
    ("bench",),
    ("quality",),
    ("compare",),
    ("study",),
    ("cli",),
    ("__main__",),
)
# Separate programs inside the package, and the only packages each may import.
SEPARATE: dict[str, tuple[str, ...]] = {"harness": ("errors", "catalog")}  # the harness engine
