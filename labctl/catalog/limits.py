"""Upper bounds for the numbers labctl accepts from files and flags, each with the reason it is there.

A number from a colleague's file or a typo on a flag must never make labctl build a billion prompts,
open a hundred thousand sockets or wait forever: every number has a finite ceiling, and NaN and the
infinities are refused where they arrive."""

from __future__ import annotations

import math

from labctl.errors import BadInput

# Any number without a closer bound: above 2**53 a float (and so JSON) no longer holds every integer.
EXACT = 2**53
# Measured requests per level: each level's prompts are built before it starts; 100000 requests at
# 10 req/s is almost three hours, so more is a typo.
MAX_REQUESTS = 100_000
# Concurrent requests: one TCP connection and file descriptor each; far beyond any engine's batch.
MAX_CONCURRENCY = 4096
# Concurrency levels in one workload: 64 levels already make an afternoon's sweep.
MAX_LEVELS = 64
# Prompt and output lengths in tokens: no served model has a context beyond 1M tokens.
MAX_TOKENS = 1_048_576
# Words of random prompt text built for one level (about 8 bytes each: ~400 MB).
MAX_PROMPT_WORDS = 50_000_000
# Any timeout: a day. Longer is a typo, and an infinite or NaN timeout never fires.
MAX_SECONDS = 86_400.0
# A suite's code check: ten minutes is already a hang for a unit test of a model's answer.
MAX_CODE_SECONDS = 600.0
# Latency SLOs in ms: a day.
MAX_SLO_MS = MAX_SECONDS * 1000
# Arrival rates in requests per second: below one per 1000 s a level never ends; above 100000 the
# client cannot keep up (and says so).
MIN_RATE, MAX_RATE = 0.001, 100_000.0


def finite(value: object) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def check_seconds(option: str, value: float, most: float = MAX_SECONDS) -> float:
    """A flag's number of seconds: finite, > 0 and at most `most`."""
    if not math.isfinite(value) or value <= 0 or value > most:
        raise BadInput(
            f"{option} {value:g}: give a number of seconds > 0 and at most {most:g} "
            "(a timeout that is not finite never fires). Nothing was started."
        )
    return value


def check_count(option: str, value: int, most: int, why: str) -> int:
    """A flag's whole number: from 1 to `most`."""
    if not 1 <= value <= most:
        raise BadInput(f"{option} {value}: give a whole number from 1 to {most} ({why}).")
    return value
