"""Which listeners count as the engine binding more than its record says (labctl/host/engine/bound.py)."""

from __future__ import annotations

import pytest

from labctl.host.engine.bound import bound_problem
from labctl.host.remote.ports import parse_tables


@pytest.mark.parametrize(
    ("found", "expected", "problem"),
    [
        ({("127.0.0.1", 8000)}, "127.0.0.1", None),
        ({("0.0.0.0", 8000)}, "127.0.0.1", "the engine listens on 0.0.0.0:8000"),
        ({("::", 8000)}, "127.0.0.1", "the engine listens on [::]:8000"),
        ({("127.0.0.1", 8000), ("10.0.0.5", 8000)}, "127.0.0.1", "the engine listens on 10.0.0.5:8000"),
        ({("127.0.0.1", 8001)}, "127.0.0.1", "nothing listens on port 8000 in the engine's network namespace"),
        ({("0.0.0.0", 8000)}, "0.0.0.0", None),
    ],
)
def test_bound_problem(found: set[tuple[str, int]], expected: str, problem: str | None) -> None:
    assert bound_problem(found, expected, 8000) == problem


def test_the_kernel_tables_parse_to_addresses() -> None:
    tcp = (
        "  sl  local_address rem_address   st\n"
        "   0: 0100007F:1F40 00000000:0000 0A\n"
        "   1: 00000000:1F41 00000000:0000 0A\n"
        "   2: 0100007F:1F42 0100007F:9C40 01\n"
    )
    tcp6 = "  sl  local_address\n   0: 00000000000000000000000000000000:1F43 00000000000000000000000000000000:0000 0A\n"
    found = parse_tables(tcp + tcp6)
    assert found == {("127.0.0.1", 8000), ("0.0.0.0", 8001), ("::", 8003)}
    assert bound_problem(found, "127.0.0.1", 8001) == "the engine listens on 0.0.0.0:8001"
