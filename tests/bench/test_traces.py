"""Timestamped traces as their publishers write them: Mooncake/AIPerf JSONL (ms) and Azure's CSV (a date and time
with seven fractional digits), read into arrivals from 0 ms, in time order; a bad line is one line naming it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from labctl.bench.bench_job import prompts_of
from labctl.bench.prompts import Prompt
from labctl.bench.runner import LevelPrompts
from labctl.bench.traces import Arrival, read_trace
from labctl.errors import BadInput

MOONCAKE = """\
{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}
{"timestamp": 27000, "input_length": 100, "output_length": 10}

{"timestamp": 30000.5, "input_length": 1, "output_length": 1}
"""
AZURE = """\
TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:59,879,43
"""


def test_mooncake_and_aiperf_jsonl_in_time_order_from_zero() -> None:
    assert read_trace(MOONCAKE, "t.jsonl") == [
        Arrival(0.0, 100, 10),
        Arrival(482.0, 6955, 52),
        Arrival(3000.5, 1, 1),
    ]


def test_azure_csv_with_seven_fractional_digits() -> None:
    arrivals = read_trace(AZURE, "azure.csv")
    assert [(round(a.at_ms, 3), a.input_len, a.output_len) for a in arrivals] == [
        (0.0, 374, 44),
        (4314.579, 396, 109),
        (12319.41, 879, 43),
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("prompt,answer\nhi,there\n", "not a trace labctl reads"),
        ("", "not a trace labctl reads"),
        ('{"timestamp": -1, "input_length": 1, "output_length": 1}\n', "line 1: timestamp must be"),
        ('{"timestamp": 1, "input_length": 0, "output_length": 1}\n', "line 1: input_length must be"),
        ('{"timestamp": 1, "input_length": 1, "output_length": true}\n', "line 1: output_length must be"),
        ('{"timestamp": 1, "input_length": 1, "output_length": 1}\n[1]\n', "line 2: not a JSON object"),
        (
            '{"timestamp": 1, "input_length": 1, "output_length": 1}\n{"timestamp": 3e12, "input_length": 1, '
            '"output_length": 1}\n',
            "spans more than 30 days",
        ),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,12\n", "line 2: expected TIMESTAMP"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n", "line 2: TIMESTAMP 'yesterday'"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.x,1,2\n", "malformed fraction"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-4,2\n", "line 2: ContextTokens must be"),
    ],
)
def test_a_bad_trace_is_one_line_naming_where(text: str, says: str) -> None:
    with pytest.raises(BadInput, match=says) as caught:
        read_trace(text, "trace.jsonl")
    assert "\n" not in str(caught.value) and "trace.jsonl" in str(caught.value)


def test_a_remote_client_gets_each_prompts_arrival() -> None:
    """The bench client beside a remote engine is sent the prompts as the controller made them: a trace's arrival
    times travel with them (else it would send the trace as a closed loop)."""
    made = LevelPrompts(warm=[], measured=[Prompt("a b", 2, 3, at_s=0.25), Prompt("c", 1, 2)])
    job = {"prompts": {"warm": [], "measured": [dataclasses.asdict(p) for p in made.measured]}}
    assert prompts_of(json.loads(json.dumps(job))).measured == made.measured
