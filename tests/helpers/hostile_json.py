"""Arbitrary JSON values, and good files with one part changed, for the loaders' property tests."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.sampled_from([10**400, -(10**400), 2**63])
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT
    | st.sampled_from(["\x1b[31m", "\n", "\x00", "", "1", "sha256:" + "a" * 64])
)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=20
)


@st.composite
def mutated(draw: st.DrawFn, sample: Any) -> Any:
    """The good file with one part (at any depth) replaced by an arbitrary value, or removed."""
    data = json.loads(json.dumps(sample))
    node = data
    while isinstance(node, dict | list) and node:
        keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
        key = draw(st.sampled_from(keys))
        child = node[key]
        if not isinstance(child, dict | list) or not child or draw(st.booleans()):
            if isinstance(node, dict) and draw(st.booleans()):
                del node[key]
            else:
                node[key] = draw(VALUES)
            break
        node = child
    return data
