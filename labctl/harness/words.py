"""The harness engine's tokens: a text's pieces are its words, each with the whitespace before it (a trailing
run of whitespace is a piece of its own), and a piece's id is its UTF-8 bytes behind a marker byte.

Why ids that hold their text: they decode without a vocabulary table or any state, so /tokenize, /detokenize
and token-id prompts agree across processes and restarts, and every text round-trips (lm-eval's remote
tokenizer encodes a context and a continuation, then sends the ids back as the prompt).
"""

from __future__ import annotations

import re

PIECE = re.compile(r"\s*\S+|\s+")
MARKER = b"\x01"
MAX_ID_BITS = 4096  # 1,233 decimal digits: under the 4,300 that Python's int() and json read by default
# An id of MAX_ID_BITS holds 511 bytes after the marker; 127 characters of up to 4 bytes each always fit.
MAX_PIECE_CHARS = 127
# Ids below this are the tokenizer's reserved (special) ids: encode never makes them (a marker and at least one
# byte is >= 256) and decode gives them no text, as a tokenizer skipping its special tokens does.
RESERVED_IDS = 256


def pieces(text: str) -> list[str]:
    found = PIECE.findall(text)
    if all(len(p) <= MAX_PIECE_CHARS for p in found):
        return found
    # A word longer than an id can hold is cut from its start: the cuts of a text's prefix stay its own.
    return [p[i : i + MAX_PIECE_CHARS] for p in found for i in range(0, len(p), MAX_PIECE_CHARS)]


def count(text: str) -> int:
    return len(pieces(text))


def piece_id(piece: str) -> int:
    return int.from_bytes(MARKER + piece.encode("utf-8", "surrogatepass"), "big")  # JSON may carry a lone surrogate


def encode(text: str) -> list[int]:
    return [piece_id(p) for p in pieces(text)]


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def piece_of(token_id: object) -> str:
    """The text of one id; ValueError for anything encode() could not have made (reserved ids aside)."""
    if isinstance(token_id, bool) or not isinstance(token_id, int):
        raise ValueError(f"token id {_shown(token_id)} is not an integer")
    if token_id < 0:
        raise ValueError(f"token id {_shown(token_id)} is negative")
    if token_id < RESERVED_IDS:
        return ""
    if token_id.bit_length() > MAX_ID_BITS:
        raise ValueError(f"token id of {token_id.bit_length()} bits exceeds the harness's {MAX_ID_BITS}-bit ids")
    raw = token_id.to_bytes((token_id.bit_length() + 7) // 8, "big")
    if raw[:1] != MARKER:
        raise ValueError(f"token id {_shown(token_id)} is not a harness token id (its first byte is not 0x01)")
    try:
        return raw[1:].decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise ValueError(f"token id {_shown(token_id)} does not hold UTF-8 text") from None


def decode_pieces(token_ids: object) -> list[str]:
    if not isinstance(token_ids, list):
        raise ValueError(f"token ids must be a list of integers, not {type(token_ids).__name__}")
    found = []
    for i, token_id in enumerate(token_ids):
        try:
            found.append(piece_of(token_id))
        except ValueError as exc:
            raise ValueError(f"[{i}]: {exc}") from None
    return found


def decode(token_ids: object) -> str:
    return "".join(decode_pieces(token_ids))
