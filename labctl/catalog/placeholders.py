"""Placeholders in engine argv words: exactly `{name}` of a known value, nothing else.

Render fills each word with `str.format`, which also obeys format specs, conversions, attribute
access and indexing: `{port:>999999999}` alone builds a gigabyte string. A word therefore may hold
only `{name}` (a known placeholder) and the escapes `{{` and `}}`; anything else in braces is refused
before render runs."""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Set as AbstractSet

_BRACES = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def check_placeholder_words(words: Iterable[str], allowed: AbstractSet[str]) -> str | None:
    """None when every word is fine, else one sentence naming the first bad word by its index."""
    found = bad_placeholder(words, allowed)
    if found is None:
        return None
    index, word, problem = found
    return f"[{index}] {word[:60]!r}: {problem}"


def bad_placeholder(words: Iterable[str], allowed: AbstractSet[str]) -> tuple[int, str, str] | None:
    """The first bad word as (index, word, problem), for a caller that names the word's own line."""
    for index, word in enumerate(words):
        problem = _word_problem(word, allowed)
        if problem:
            return index, word, problem
    return None


def _word_problem(word: str, allowed: AbstractSet[str]) -> str | None:
    known = ", ".join(sorted(allowed))
    for match in _BRACES.finditer(word):
        token, inner = match.group(0), match.group(1)
        if token in ("{{", "}}"):
            continue
        if token == "{" and "}" in word[match.end() :]:  # a nested spec such as {port:{width}}
            token, inner = word[match.start() : word.rindex("}") + 1], "{"
        if inner is None:
            return f"unmatched {token!r} in {word[:60]!r}; write {{{{ or }}}} for a literal brace."
        if inner == "":
            return f"an empty {{}} names no value; write {{name}}, known: {known}."
        if not _NAME.fullmatch(inner):
            return (
                f"{token[:40]!r} is not a plain placeholder (no format spec, conversion, attribute or index "
                f"is allowed): write exactly {{name}}, known: {known}."
            )
        if inner not in allowed:
            return f"unknown placeholder {token}; known: {known}."
    return None
