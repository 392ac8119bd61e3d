"""Quality beside speed, case by case: for each suite or lm-eval task set that the first result (A) and another
(B) were both evaluated on at one version, the paired counts and the exact McNemar verdict, with each side's
quantization and thinking mode, so a difference reads as a difference of setup."""

from __future__ import annotations

from typing import Any

from labctl.compare.rules import Entry, score_text
from labctl.quality.paired import pair


def quantization(entry: Entry) -> str:
    model = (entry.record.resolved_profile or {}).get("model") or {}
    return str(model.get("quantization") or "unknown")


def setup_text(entry: Entry) -> str:
    return f"{entry.label}, quantization {quantization(entry)}, thinking {entry.thinking}"


def paired_quality(entries: list[Entry]) -> list[dict[str, Any]]:
    found = []
    first = entries[0]
    for other in entries[1:]:
        for name in sorted(first.evals.keys() & other.evals.keys()):
            a, b = first.evals[name], other.evals[name]
            if a["suite"].get("sha256") != b["suite"].get("sha256"):
                continue  # the checklist's suite-version rule refuses or marks this pair
            found.append(
                {
                    "suite": name,
                    "version": a["suite"].get("full_version"),
                    "a": {"id": first.given, "eval_id": a["eval_id"], "setup": setup_text(first)},
                    "b": {"id": other.given, "eval_id": b["eval_id"], "setup": setup_text(other)},
                    "a_score": score_text(name, a).removeprefix(f"{name} "),
                    "b_score": score_text(name, b).removeprefix(f"{name} "),
                    **pair(a["cases"], b["cases"]).to_json(),
                }
            )
    return found


def quality_lines(entries: list[Entry]) -> list[str]:
    lines = []
    for p in paired_quality(entries):
        lines += [
            f"quality {p['suite']} ({p['version']}), case by case:",
            f"  A {p['a']['setup']}: {p['a_score']}",
            f"  B {p['b']['setup']}: {p['b_score']}",
            f"  both right {p['both_right']}, both wrong {p['both_wrong']}, only A {p['only_a']}, only B "
            f"{p['only_b']}; exact McNemar p={p['p_value']:.3g} → {p['verdict']} (95 %)",
        ]
    return lines
