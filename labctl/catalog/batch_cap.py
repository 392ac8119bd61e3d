"""An engine's batch cap: the most sequences it runs at once, read from its command line or, where the command
line does not set it, from the defaults its folder states (engines/NAME/engine.yaml `batch_cap`). A level
with more streams than the cap queues the rest inside the engine, which inflates its first-token times."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CapSetting:
    """One of the engine's own options that bounds the sequences it runs at once."""

    flag: str
    default: int | None  # None: the engine fixes no number (it derives one at start)
    default_from: str  # where the default was read, or how the engine derives it
    meaning: str = ""


@dataclass(frozen=True)
class BatchCap:
    """The cap a run had (or a plan will have): None when no number is known, with why."""

    value: int | None
    setting: str = ""  # the option and its value, e.g. "--max-num-seqs 8"
    source: str = ""  # where that value came from
    flag: str = ""  # the option that sets it

    @property
    def text(self) -> str:
        if self.value is None:
            return f"no cap known ({self.source})"
        return f"{self.value} ({self.setting}, {self.source})"

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "setting": self.setting, "source": self.source, "flag": self.flag}

    def above(self, levels: Sequence[int]) -> list[int]:
        """The levels with more streams than the cap."""
        return [] if self.value is None else [c for c in levels if c > self.value]

    def queued(self, concurrency: int) -> str | None:
        """What a level above the cap did: "c=64 ran against a cap of 8: 56 requests queue"."""
        if self.value is None or concurrency <= self.value:
            return None
        return (
            f"c={concurrency} ran against a cap of {self.value}: {concurrency - self.value} requests queue "
            f"({self.setting}, {self.source})"
        )


@dataclass(frozen=True)
class CapRule:
    """How an engine's cap is read: its settings (the smallest known one caps the batch)."""

    engine: str
    settings: tuple[CapSetting, ...] = ()

    def read(self, argv: Sequence[str], where: str) -> BatchCap:
        """The cap of a command line (`where` names it, e.g. "the profile's command line")."""
        if not self.settings:
            return BatchCap(None, source=f"engines/{self.engine}/engine.yaml states no batch_cap")
        known: list[tuple[int, str, str, str]] = []
        unknown: list[str] = []
        for setting in self.settings:
            named = f" ({setting.meaning})" if setting.meaning else ""
            given = flag_value(argv, setting.flag)
            if given is not None:
                known.append((given, f"{setting.flag} {given}{named}", f"set on {where}", setting.flag))
            elif setting.default is not None:
                value = setting.default
                known.append(
                    (value, f"{setting.flag} {value}{named}", f"its default: {setting.default_from}", setting.flag)
                )
            else:
                unknown.append(f"{setting.flag} not set: {setting.default_from}")
        if not known:
            return BatchCap(None, source="; ".join(unknown))
        value, setting_text, source, flag = min(known)
        return BatchCap(value, setting_text, source, flag)


def flag_value(argv: Sequence[str], flag: str) -> int | None:
    """The whole number an option is given (`--flag N` or `--flag=N`; the last one wins, as argparse and clap
    take it); None when it is absent or not a whole number."""
    found: str | None = None
    for index, word in enumerate(argv):
        if word == flag and index + 1 < len(argv):
            found = argv[index + 1]
        elif word.startswith(flag + "="):
            found = word[len(flag) + 1 :]
    if found is None or not found.strip().isdigit():
        return None
    return int(found)
