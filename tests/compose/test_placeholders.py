"""Engine argv words may name a placeholder only as exactly `{name}`: `expand_args` feeds each word to
str.format, where a format spec such as `{port:>999999999}` builds a gigabyte string and hangs render."""

from __future__ import annotations

import pytest

from labctl.catalog.placeholders import bad_placeholder, check_placeholder_words

KNOWN = {"port", "model", "host"}


@pytest.mark.parametrize(
    "words",
    [
        [],
        ["--port", "{port}"],
        ["--model={model}", "{host}:{port}"],
        ["plain", "--json", "{{literal braces}}", "{{{port}}}"],
    ],
)
def test_exact_placeholders_pass(words: list[str]) -> None:
    assert check_placeholder_words(words, KNOWN) is None


@pytest.mark.parametrize(
    "word, fragment",
    [
        ("{port:>999999999}", "format spec"),
        ("{port:,}", "format spec"),
        ("{port:}", "format spec"),
        ("{port!r}", "format spec"),
        ("{port:{port}}", "format spec"),
        ("{port.real}", "format spec"),
        ("{port[0]}", "format spec"),
        ("{0}", "format spec"),
        ("{}", "empty"),
        ("{prot}", "unknown placeholder {prot}"),
        ("{ port }", "format spec"),
        ("{port", "unmatched"),
        ("port}", "unmatched"),
    ],
)
def test_anything_but_exactly_name_is_refused(word: str, fragment: str) -> None:
    problem = check_placeholder_words(["--x", word], KNOWN)
    assert problem is not None and fragment in problem, problem
    assert "[1]" in problem and "\n" not in problem


def test_the_known_names_are_listed() -> None:
    problem = check_placeholder_words(["{prot}"], KNOWN)
    assert problem is not None and problem.endswith("known: host, model, port.")


def test_frozensets_are_accepted() -> None:
    assert check_placeholder_words(["{port}"], frozenset(KNOWN)) is None


def test_bad_placeholder_gives_the_index_for_the_words_own_line() -> None:
    assert bad_placeholder(["--port", "{prot}"], KNOWN) == (
        1,
        "{prot}",
        "unknown placeholder {prot}; known: host, model, port.",
    )
    assert bad_placeholder(["--port", "{port}"], KNOWN) is None
