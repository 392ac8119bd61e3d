"""Why a cell failed, in the study's classes: start failures (contract, memory, pull, readiness), a crash or an
out-of-memory in the middle, an error rate above the study's limit, the SLO out of reach, interrupted."""

from __future__ import annotations

import re

from labctl.bench.metric_table import BY_KEY
from labctl.bench.results import Level
from labctl.host.docker import daemon as dk

GOODPUT_SHARE = 0.9  # a level meets the SLO when this share of its requests met every bound (as --find-max-rate)

# (words in a refusal, its class, whether it is an infrastructure flake worth one more try). Whole words:
# "already in use" is not a readiness problem, nor an ssh:// endpoint named in passing an SSH one.
_START = (
    (r"does not fit", "start: memory", False),
    (r"contract|not accepted|unknown option|rejected", "start: contract", False),
    (r"pull(ing|ed)?|manifest|registry", "start: pull", True),
    (r"ssh(?!://)|connection reset|broken pipe", "start: ssh", True),
    (r"ready|readiness|timed out|timeout", "start: readiness timeout", False),
)


def classify_start(message: str) -> tuple[str, bool]:
    text = message.lower()
    for words, kind, flake in _START:
        if re.search(rf"\b(?:{words})\b", text):
            return kind, flake
    return "start: other", False


def engine_state(run_id: str) -> tuple[bool, bool]:
    """(whether the run's engine still runs, whether the kernel killed it for memory)."""
    try:
        containers = dk.labctl_containers(run_id=run_id)
    except Exception:  # noqa: BLE001 - a host that no longer answers: the engine is gone for this cell
        return False, False
    serve = [c for c in containers if dk.service_of(c) in ("serve", "")]
    if not serve:
        return False, False
    state = serve[0].state
    return bool(state.running), bool(getattr(state, "oom_killed", False))


def meets_slo(level: Level) -> bool:
    goodput, rate = level.value(BY_KEY["goodput"]), level.value(BY_KEY["request_throughput"])
    if level.partial or goodput is None or not rate:
        return False
    return goodput >= GOODPUT_SHARE * rate
