"""Verifiable instructions checked with the standard library only (lm-eval's IFEval needs NLTK data, which it
downloads at run time): words are runs of letters, digits and apostrophes, sentences end at . ! or ?.
Each kind is a pure function of the answer and its arguments; CHECK_VERSION moves when a meaning changes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

CHECK_VERSION = 1
WORD = re.compile(r"[A-Za-z0-9']+")


def words(text: str) -> int:
    return len(WORD.findall(text))


def _json(text: str) -> bool:
    body = text.strip()
    fence = re.fullmatch(r"```(?:json)?\s*\n(.*?)\n?```", body, re.S)
    try:
        json.loads(fence.group(1) if fence else body)
    except ValueError:
        return False
    return True


def _bullets(text: str, n: int) -> bool:
    return len(re.findall(r"^\s*[*-] ", text, re.M)) == n


CHECKS: dict[str, Callable[[str, dict[str, Any]], bool]] = {
    "max_words": lambda t, a: words(t) <= int(a["n"]),
    "min_words": lambda t, a: words(t) >= int(a["n"]),
    "lowercase": lambda t, a: t == t.lower() and any(c.isalpha() for c in t),
    "uppercase": lambda t, a: t == t.upper() and any(c.isalpha() for c in t),
    "include_word": lambda t, a: re.search(rf"\b{re.escape(str(a['word']))}\b", t, re.I) is not None,
    "exclude_word": lambda t, a: re.search(rf"\b{re.escape(str(a['word']))}\b", t, re.I) is None,
    "ends_with": lambda t, a: t.rstrip().endswith(str(a["phrase"])),
    "starts_with": lambda t, a: t.lstrip().startswith(str(a["phrase"])),
    "json": lambda t, a: _json(t),
    "bullets": lambda t, a: _bullets(t, int(a["n"])),
    "no_commas": lambda t, a: "," not in t,
    "quoted": lambda t, a: len(t.strip()) > 1 and t.strip()[0] == '"' and t.strip()[-1] == '"',
}


def followed(text: str, instructions: list[dict[str, Any]]) -> list[bool]:
    """Each instruction's verdict; an unknown kind is an error in the task data, not a failed answer."""
    verdicts = []
    for instruction in instructions:
        kind = instruction.get("kind")
        if kind not in CHECKS:
            raise ValueError(f"unknown instruction kind {kind!r}: one of {', '.join(sorted(CHECKS))}")
        verdicts.append(CHECKS[str(kind)](text, instruction.get("args") or {}))
    return verdicts
