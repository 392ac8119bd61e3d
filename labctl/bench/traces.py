"""Timestamped request traces, read as the tools that publish them write them, into arrivals a bench replays:

- JSONL as the Mooncake traces and AIPerf's fixed schedule (`--fixed-schedule`, its mooncake_trace dataset) use:
  one object a line, `timestamp` in milliseconds, `input_length` and `output_length` in tokens (`hash_ids`, the
  trace's shared prefix blocks, are not replayed: every prompt labctl sends is its own);
- CSV as Azure's public LLM inference traces use: `TIMESTAMP,ContextTokens,GeneratedTokens`, the timestamp a
  date and time (`2023-11-16 18:15:46.6805900`).

Pure: text in, arrivals out, every value bounded; a bad line is one BadInput naming the file and the line."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime

from labctl.errors import BadInput

MAX_ARRIVALS = 1_000_000
MAX_TRACE_LENGTH = 1_000_000  # tokens of one request's input or output: beyond any model's context
MAX_SPAN_MS = 30 * 24 * 3600 * 1000  # a month: a trace longer than that is not a bench
AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True)
class Arrival:
    at_ms: float  # since the trace's first arrival
    input_len: int
    output_len: int


def read_trace(text: str, where: str) -> list[Arrival]:
    """The arrivals of a trace file (`where` names it in messages), in time order, the first at 0 ms."""
    lines = text.splitlines()
    first = next((line for line in lines if line.strip()), "")
    if first.lstrip().startswith("{"):
        raw = _jsonl(lines, where)
        kind = "Mooncake/AIPerf JSONL"
    elif first.strip().split(",")[:3] == list(AZURE_HEADER):
        raw = _azure(lines, where)
        kind = "Azure CSV"
    else:
        raise BadInput(
            f"{where}: not a trace labctl reads. Give JSONL lines like "
            '{"timestamp": 0, "input_length": 512, "output_length": 128} (Mooncake, AIPerf) or a CSV with the header '
            "TIMESTAMP,ContextTokens,GeneratedTokens (Azure)."
        )
    if not raw:
        raise BadInput(f"{where}: the {kind} trace holds no arrival.")
    raw.sort(key=lambda arrival: arrival[0])  # a stable sort: equal timestamps keep the file's order
    start = raw[0][0]
    if raw[-1][0] - start > MAX_SPAN_MS:
        raise BadInput(f"{where}: the trace spans more than 30 days; cut it to the stretch to replay.")
    return [Arrival(at - start, n_in, n_out) for at, n_in, n_out in raw]


def _length(value: object, where: str, line: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_TRACE_LENGTH:
        raise BadInput(f"{where}, line {line}: {name} must be a whole number of tokens, 1 to {MAX_TRACE_LENGTH}.")
    return value


def _jsonl(lines: list[str], where: str) -> list[tuple[float, int, int]]:
    out: list[tuple[float, int, int]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(out) >= MAX_ARRIVALS:
            raise BadInput(f"{where}: more than {MAX_ARRIVALS:,} arrivals; cut the trace to the stretch to replay.")
        try:
            obj = json.loads(line)
        except ValueError:
            raise BadInput(f"{where}, line {number}: not a JSON object.") from None
        if not isinstance(obj, dict):
            raise BadInput(f"{where}, line {number}: not a JSON object.")
        at = obj.get("timestamp")
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or at < 0:
            raise BadInput(f"{where}, line {number}: timestamp must be a number of milliseconds >= 0.")
        n_in = _length(obj.get("input_length"), where, number, "input_length")
        n_out = _length(obj.get("output_length"), where, number, "output_length")
        out.append((float(at), n_in, n_out))
    return out


def _azure(lines: list[str], where: str) -> list[tuple[float, int, int]]:
    out: list[tuple[float, int, int]] = []
    for number, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        if len(out) >= MAX_ARRIVALS:
            raise BadInput(f"{where}: more than {MAX_ARRIVALS:,} arrivals; cut the trace to the stretch to replay.")
        cells = line.strip().split(",")
        if len(cells) != 3:
            raise BadInput(f"{where}, line {number}: expected TIMESTAMP,ContextTokens,GeneratedTokens.")
        stamp, context, generated = (cell.strip() for cell in cells)
        at = _azure_ms(stamp, where, number)
        n_in = _length(int(context) if context.isdigit() else None, where, number, "ContextTokens")
        n_out = _length(int(generated) if generated.isdigit() else None, where, number, "GeneratedTokens")
        out.append((at, n_in, n_out))
    return out


def _azure_ms(stamp: str, where: str, line: int) -> float:
    """`2023-11-16 18:15:46.6805900`: Azure writes seven fractional digits, which datetime does not take."""
    whole, _, fraction = stamp.partition(".")
    try:
        moment = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)  # offsets only: no DST step
    except ValueError:
        raise BadInput(
            f"{where}, line {line}: TIMESTAMP {stamp[:40]!r} is not like 2023-11-16 18:15:46.6805900."
        ) from None
    if fraction and not (fraction.isdigit() and len(fraction) <= 9):
        raise BadInput(f"{where}, line {line}: TIMESTAMP {stamp[:40]!r} has a malformed fraction of a second.")
    seconds = moment.timestamp() + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)
    return seconds * 1000.0
