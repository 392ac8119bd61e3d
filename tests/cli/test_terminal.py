"""The one place terminal escaping lives (labctl.cli.terminal), the table every listing prints through, and
the Markdown escaping of reports: unit tests (issue 29, class 9)."""

from __future__ import annotations

from labctl.cli.context import table
from labctl.cli.terminal import inert, inert_value
from labctl.compare.formats import md

HOSTILE = "evil\x1b[2J\x1b[31m\nFAKE: all checks passed\r"


def test_inert_escapes_every_control_but_a_messages_own_layout() -> None:
    assert inert("a\x1b[31mb\nc\td\re\u202ef\x9b") == "a\\x1b[31mb\nc\td\\re\\u202ef\\x9b"
    assert inert_value("a\nb\tc\x1b") == "a\\nb\\tc\\x1b"


def test_every_table_keeps_a_hostile_cell_on_its_line() -> None:
    """status, runs, bench list, eval list, diff: every terminal table goes through context.table."""
    text = table([["run-1", HOSTILE, "ok"], ["run-2", "plain", "ok"]], ["RUN", "OWNER", "HEALTH"])
    assert len(text.splitlines()) == 3 and "\x1b" not in text and "\\x1b[2J" in text


def test_markdown_text_cannot_open_a_tag_or_a_cell() -> None:
    assert md("a|<script>x</script>\n| b\x1b") == "a\\|&lt;script&gt;x&lt;/script&gt; \\| b\\x1b"
