"""Text from files reaches a terminal inert: every value labctl prints (from records, profiles, results,
exports, error messages quoting them) goes through here, so an ESC, a carriage return or a newline inside a
value is shown escaped (`\\x1b`, `\\r`, `\\n`) and can neither recolour, move the cursor, nor forge a line."""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the Unicode bidirectional marks, overrides and isolates (they reorder what is
# shown); a whole message keeps its own tab (\x09) and newline (\x0a)
_IN_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_IN_VALUE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def inert(text: str) -> str:
    """A whole message: its own line breaks and tabs (labctl's layout) kept, every other control escaped."""
    return _IN_TEXT.sub(_shown, text)


def inert_value(text: str) -> str:
    """One value (a table cell): newlines and tabs escaped too, so it stays on its line."""
    return _IN_VALUE.sub(_shown, text)
