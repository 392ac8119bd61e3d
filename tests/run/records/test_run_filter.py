"""`runs --since`: a time ago or a date, UTC unless it says otherwise; anything else one clear refusal."""

from __future__ import annotations

import datetime as dt

import pytest

from labctl.errors import BadInput
from labctl.run.records.run_filter import parse_since

NOW = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("text", "when"),
    [
        ("30m", dt.datetime(2026, 12, 7, 11, 30, tzinfo=dt.UTC)),
        ("2h", dt.datetime(2026, 12, 7, 10, 0, tzinfo=dt.UTC)),
        ("3d", dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)),
        ("1w", dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)),
        ("2026-12-06", dt.datetime(2026, 12, 6, tzinfo=dt.UTC)),
        ("2026-12-06T04:00+01:00", dt.datetime(2026, 12, 6, 3, 0, tzinfo=dt.UTC)),
    ],
)
def test_a_time_ago_or_a_date(text: str, when: dt.datetime) -> None:
    assert parse_since(text, NOW) == when


@pytest.mark.parametrize("text", ["yesterday", "3 days", "-2h", "999999w", ""])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(BadInput, match="--since"):
        parse_since(text, NOW)
