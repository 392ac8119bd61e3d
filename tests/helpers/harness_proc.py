"""Start the harness engine as a local process on a free loopback port, for tests and benchmarks."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx


def free_port() -> int:
    """A free loopback port; within LABCTL_TEST_PORTS (LOW-HIGH) when set, on a machine whose ports are shared out."""
    chosen = os.environ.get("LABCTL_TEST_PORTS", "")
    if chosen:
        low, _, high = chosen.partition("-")
        return free_port_in(int(low), int(high))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def harness(
    *args: str, model: str = "harness", ready: bool = True, env: dict[str, str] | None = None, port: int | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "labctl.harness", "--model", model, "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        if ready:
            deadline = time.monotonic() + 15
            while True:
                try:
                    if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"harness did not become ready: {proc.stdout.read() if proc.stdout else ''!r}")
                time.sleep(0.02)
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()


def free_port_in(low: int, high: int) -> int:
    """A free loopback port within [low, high] (tests that must keep to a range of ports)."""
    ports = list(range(low, high + 1))
    random.shuffle(ports)  # two test workers do not race for the same first port
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {low}-{high}")


def wait_healthy(url: str, seconds: float = 60) -> None:
    """Poll GET url/health until it answers 200."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} did not become healthy within {seconds:g} s")


@contextmanager
def vllm_persona(*flags: str, key: str | None = None, max_model_len: int | None = None) -> Iterator[str]:
    """The harness acting out vLLM 0.34.0 (`vllm serve Qwen/Qwen3-8B`, served as `m`) on a free port; its base URL."""
    port = free_port()
    argv = [sys.executable, "-m", "labctl.harness", "--persona", "vllm", "--persona-version", "0.34.0", "--"]
    argv += ["serve", "Qwen/Qwen3-8B", "--served-model-name", "m", "--port", str(port), "--host", "127.0.0.1"]
    argv += [*(["--max-model-len", str(max_model_len)] if max_model_len else []), *flags]
    env = {**os.environ, "NVIDIA_VISIBLE_DEVICES": "0", "LABCTL_PERSONA_LOAD_S": "0"}
    env |= {"HARNESS_TTFT_MS": "1", "HARNESS_TPOT_MS": "1"}
    env.pop("VLLM_API_KEY", None)
    if key:
        env["VLLM_API_KEY"] = key
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the vLLM persona did not start"
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
