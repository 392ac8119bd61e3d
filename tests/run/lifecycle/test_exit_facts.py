"""A dead engine's record says what Docker knows of its end (exit code, signal, OOM kill, Docker's error)
and never invents who stopped it."""

from __future__ import annotations

from labctl.run.lifecycle.reconcile import exit_facts


def test_a_signal_an_oom_kill_and_an_error_are_named() -> None:
    assert exit_facts({"exit_code": 137, "oom_killed": False}) == "exit code 137 (SIGKILL), not OOMKilled"
    oom = exit_facts({"exit_code": 137, "oom_killed": True, "finished_at": "2026-12-07T01:02:03"})
    assert oom == "exit code 137 (SIGKILL), OOMKilled (the kernel's out-of-memory killer), at 2026-12-07T01:02:03"
    assert exit_facts({"exit_code": 143}).startswith("exit code 143 (SIGTERM)")
    assert exit_facts({"exit_code": 1, "error": "x" * 500}) == f"exit code 1, not OOMKilled, error: {'x' * 200}"
    assert exit_facts({"exit_code": 0}) == "exit code 0, not OOMKilled"
    assert exit_facts({"exit_code": 255}) == "exit code 255, not OOMKilled"  # no signal 127
