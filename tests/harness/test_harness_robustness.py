"""The harness engine under bad clients and injected faults: a proper HTTP error or a clean close,
and everyone else keeps being served."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest
from helpers.harness_proc import free_port, harness

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers


def ask(base: str, **extra: object) -> str:
    c = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=10)
    reply = c.chat.completions.create(
        model="harness", messages=[{"role": "user", "content": "hello"}], max_tokens=3, **extra
    )  # type: ignore[call-overload]
    return reply.choices[0].message.content


def raw(base: str, data: bytes, read: bool = True) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(data)
        if not read:
            return b""
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def test_oversized_body_is_413_and_server_lives() -> None:
    with harness("--max-body-bytes", "1000", "--ttft-ms", "1", "--tpot-ms", "0") as (base, _):
        r = httpx.post(f"{base}/v1/chat/completions", content=b"x" * 5000)
        assert r.status_code == 413 and r.json()["error"]["code"] == 413
        assert ask(base)


def test_garbage_request_line_and_huge_headers() -> None:
    with harness("--ttft-ms", "1", "--tpot-ms", "0") as (base, _):
        assert raw(base, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert raw(base, b"GET /health HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n").startswith(b"HTTP/1.1 431 ")
        assert ask(base)


def test_slow_loris_is_cut_and_others_served() -> None:
    with harness("--header-timeout", "0.5", "--ttft-ms", "1", "--tpot-ms", "0") as (base, _):
        host, port = base.removeprefix("http://").split(":")
        lazy = socket.create_connection((host, int(port)))
        lazy.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # never finishes its headers
        assert ask(base)  # served while the slow client hangs
        lazy.settimeout(3)
        start = time.monotonic()
        assert lazy.recv(100) == b""  # the server closed it
        assert time.monotonic() - start < 3
        lazy.close()


def test_client_disconnect_mid_stream_frees_the_slot() -> None:
    with harness("--ttft-ms", "1", "--tpot-ms", "20", "--max-num-seqs", "1") as (base, _):
        with httpx.stream(
            "POST",
            f"{base}/v1/chat/completions",
            json={
                "model": "harness",
                "messages": [{"role": "user", "content": "x"}],
                "max_tokens": 200,
                "ignore_eos": True,
                "stream": True,
            },
        ) as r:
            for _ in r.iter_lines():
                break  # walk away after the first event
        assert ask(base)  # the only slot was released
        metrics = httpx.get(f"{base}/metrics").text
        assert 'harness_num_requests_running{model_name="harness"} 0' in metrics


def test_queueing_beyond_max_num_seqs() -> None:
    # 4 s: under the tiers' load, three threads' requests once took longer than 1.5 s to all arrive
    with harness("--ttft-ms", "4000", "--tpot-ms", "0", "--max-num-seqs", "1") as (base, _):
        import threading

        threads = [threading.Thread(target=ask, args=(base,)) for _ in range(3)]
        for t in threads:
            t.start()
        wanted = (
            'harness_num_requests_running{model_name="harness"} 1',
            'harness_num_requests_waiting{model_name="harness"} 2',
        )
        metrics = ""
        while not all(w in metrics for w in wanted) and any(t.is_alive() for t in threads):
            metrics = httpx.get(f"{base}/metrics").text  # all three arrive within the first one's 4 s
        for t in threads:
            t.join()
        assert all(w in metrics for w in wanted), metrics


def test_ttft_and_tpot_follow_the_model() -> None:
    with harness("--ttft-ms", "150", "--tpot-ms", "30") as (base, _):
        start = time.perf_counter()
        stamps = []
        with httpx.stream(
            "POST",
            f"{base}/v1/completions",
            json={"model": "harness", "prompt": "x", "max_tokens": 5, "ignore_eos": True, "stream": True},
        ) as r:
            for line in r.iter_lines():
                if line.startswith("data: {") and '"text":""' not in line.replace(" ", ""):
                    stamps.append(time.perf_counter() - start)
        assert len(stamps) == 5
        # Never early: token i leaves no sooner than TTFT + i x TPOT. (Gaps between two tokens are not
        # checked: on a loaded host one late read shortens the next gap without anything being early.)
        assert all(t >= 0.15 + i * 0.03 - 0.002 for i, t in enumerate(stamps)), stamps


def test_cold_start_keeps_port_closed_then_warmup_503() -> None:
    with harness("--cold-start", "1.0", "--warmup", "1.0", ready=False) as (base, _):
        time.sleep(0.3)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{base}/health")
        deadline = time.monotonic() + 5
        while True:
            try:
                r = httpx.get(f"{base}/health")
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert r.status_code == 503
        assert httpx.get(f"{base}/v1/models").status_code == 200  # answers before warm-up ends, as SGLang does
        with pytest.raises(openai.InternalServerError):
            ask(base)
        time.sleep(1.0)
        assert httpx.get(f"{base}/health").status_code == 200


def test_fail_on_start_exits_3() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "labctl.harness", "--port", str(free_port()), "--fail-on-start"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert proc.returncode == 3 and "failing during start-up" in proc.stdout


def test_never_ready() -> None:
    with harness("--never-ready", ready=False) as (base, proc):
        deadline = time.monotonic() + 30  # until it listens (a loaded host starts Python slowly), then 503 for good
        while True:
            try:
                status = httpx.get(f"{base}/health").status_code
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "the harness never listened"
                time.sleep(0.05)
        assert status == 503
        time.sleep(0.2)
        assert httpx.get(f"{base}/health").status_code == 503


def test_crash_after_n_requests() -> None:
    with harness("--crash-after", "2", "--ttft-ms", "1", "--tpot-ms", "0") as (base, proc):
        ask(base)
        ask(base)
        with pytest.raises(openai.APIConnectionError):
            ask(base)
        assert proc.wait(5) == 1


def test_error_rate_and_dropped_streams() -> None:
    with harness("--error-rate", "1.0") as (base, _):
        with pytest.raises(openai.InternalServerError) as err:
            ask(base)
        assert err.value.status_code == 503
    with harness("--drop-stream-rate", "1.0", "--ttft-ms", "1", "--tpot-ms", "1") as (base, _):
        c = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)
        with pytest.raises((httpx.RemoteProtocolError, openai.APIError)):
            list(
                c.chat.completions.create(
                    model="harness",
                    messages=[{"role": "user", "content": "x"}],
                    max_tokens=10,
                    stream=True,
                    extra_body={"ignore_eos": True},
                )
            )
        assert ask(base)
