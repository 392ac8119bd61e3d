"""Which runs `labctl runs` lists: the user's own, one engine's, one status's, those since a time."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from labctl.errors import BadInput
from labctl.run.records.record import Record

_AGO = re.compile(r"([0-9]{1,6})(m|h|d|w)")
_UNIT = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_AGO_S = 10 * 366 * 86400  # ten years: further back than any record labctl wrote


def parse_since(text: str, now: dt.datetime) -> dt.datetime:
    """`30m`, `2h`, `3d`, `1w` before now, or a date or time (`2026-12-07`, `2026-12-07T04:00`, UTC unless
    it says otherwise)."""
    relative = _AGO.fullmatch(text.strip())
    if relative:
        seconds = int(relative.group(1)) * _UNIT[relative.group(2)]
        if seconds > MAX_AGO_S:
            raise BadInput(f"--since {text!r}: at most ten years back.")
        return now - dt.timedelta(seconds=seconds)
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadInput(
            f"--since {text[:40]!r}: give a time ago (30m, 2h, 3d, 1w) or a date or time (2026-12-07, "
            "2026-12-07T04:00)."
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def created(record: Record) -> dt.datetime | None:
    try:
        when = dt.datetime.fromisoformat(record.created_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


@dataclass(frozen=True)
class RunFilter:
    owner: str | None = None
    engine: str | None = None
    status: str | None = None
    since: dt.datetime | None = None

    def keeps(self, record: Record) -> bool:
        if self.owner is not None and record.owner != self.owner:
            return False
        if self.engine is not None and record.engine != self.engine:
            return False
        if self.status is not None and record.status != self.status:
            return False
        if self.since is not None:
            when = created(record)
            return when is not None and when >= self.since
        return True
