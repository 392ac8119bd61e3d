"""A start failure names its cause: the log's first exception line (else its first error line), even when
fifty lines of shutdown noise follow it."""

from __future__ import annotations

import pytest

from labctl.run.lifecycle.log_cause import first_error_line

VLLM = "\n".join(
    [
        "INFO 12-06 10:00:01 [api_server.py:1] vLLM API server version 0.11.0",
        "INFO 12-06 10:00:09 [gpu_worker.py:1] Available KV cache memory: -1.2 GiB",
        "ERROR 12-06 10:00:09 [core.py:700] EngineCore failed to start.",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/vllm/v1/engine/core.py", line 691, in run_engine_core',
        "ValueError: Available memory (1.2 GiB) is less than requested memory for kv cache (4.0 GiB).",
        *[f"INFO 12-06 10:00:1{i % 10} [shutdown.py:1] cleaning up worker {i}" for i in range(50)],
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ]
)


def test_the_first_exception_line_is_the_cause_not_the_last_one() -> None:
    assert first_error_line(VLLM) == (
        "ValueError: Available memory (1.2 GiB) is less than requested memory for kv cache (4.0 GiB)."
    )


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        ("starting\n[error] bind() to 0.0.0.0:8000 failed (98: Address in use)\nexiting", "[error] bind()"),
        ("loading\nthread 'main' panicked at src/main.rs:10:5:\nno GPU", "thread 'main' panicked at"),
        ("loading\nerror: unexpected argument '--foo' found\n", "error: unexpected argument"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", "torch.OutOfMemoryError:"),
    ],
)
def test_other_engines_error_lines(log: str, cause: str) -> None:
    found = first_error_line(log)
    assert found is not None and found.startswith(cause), found


def test_a_log_without_an_error_gives_nothing_and_long_lines_are_cut() -> None:
    assert first_error_line("INFO loading\nINFO still loading\n") is None
    assert first_error_line("") is None
    assert len(first_error_line("ValueError: " + "x" * 5000) or "") == 300


def test_an_exception_after_a_log_prefix_is_found() -> None:
    log = "harness: loading\nharness: ValueError: no room for the KV cache\nharness: shutting down worker 0\n"
    assert first_error_line(log) == "ValueError: no room for the KV cache"
    assert first_error_line("ERROR 12-06 [core.py:1] torch.OutOfMemoryError: CUDA out of memory") is not None
    assert first_error_line("INFO MyErrorHandler: ready") is None  # a name ending in Handler is no exception
