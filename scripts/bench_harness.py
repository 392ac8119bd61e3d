"""make bench-harness: what the harness engine sustains, measured with a minimal raw-socket client.

(a) total streamed tokens/s to 256 concurrent streaming clients with TPOT 0 (target >= 20,000/s);
(b) with TTFT 50 ms and TPOT 20 ms at 1, 64, 128, 256 streams, how late the server emits each first
    token against its own schedule (server-side; target p50 <= 1 ms, p99 <= 5 ms at 256).
Client and server share this 2-core machine; figures are medians of the run, not a promise.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request

TOKEN = b'{"content":'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(*args: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "labctl.harness",
            "--model",
            "bench",
            "--port",
            str(port),
            "--max-num-seqs",
            "1024",
            *args,
        ],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc, port
        except OSError:
            time.sleep(0.05)
    raise SystemExit("harness did not start")


def request_bytes(port: int, max_tokens: int) -> bytes:
    body = json.dumps(
        {
            "model": "bench",
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


async def stream_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, req: bytes) -> int:
    writer.write(req)
    buf = b""
    while not buf.endswith(b"\r\n0\r\n\r\n"):
        chunk = await reader.read(65536)
        if not chunk:
            raise ConnectionError("server closed the stream")
        buf += chunk
    return buf.count(TOKEN)


async def client_loop(port: int, req: bytes, until: float, rounds: int | None) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    tokens = 0
    done = 0
    while (rounds is None and time.monotonic() < until) or (rounds is not None and done < rounds):
        tokens += await stream_once(reader, writer, req)
        done += 1
    writer.close()
    return tokens


async def throughput(port: int, clients: int, seconds: float) -> float:
    req = request_bytes(port, 256)
    start = time.monotonic()
    counts = await asyncio.gather(*(client_loop(port, req, start + seconds, None) for _ in range(clients)))
    return sum(counts) / (time.monotonic() - start)


async def lateness(port: int, clients: int) -> dict[str, float]:
    """One warm-up round (connections opened), then four measured rounds on the same connections."""
    req = request_bytes(port, 64)
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(clients)]
    await asyncio.gather(*(stream_once(r, w, req) for r, w in conns))
    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/harness/lateness", method="DELETE"))
    for _ in range(4):
        await asyncio.gather(*(stream_once(r, w, req) for r, w in conns))
    for _, w in conns:
        w.close()
    return json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/harness/lateness"))


def main() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    print(f"bench-harness on {os.cpu_count()} cores (client and server on the same machine)")
    proc, port = start("--ttft-ms", "0", "--tpot-ms", "0")
    try:
        rates = [asyncio.run(throughput(port, 256, 4.0)) for _ in range(3)]
    finally:
        proc.terminate()
        proc.wait()
    rates.sort()
    print(
        f"(a) 256 streams, TPOT 0: {rates[1]:,.0f} tokens/s median of 3 "
        f"(runs {', '.join(f'{r:,.0f}' for r in rates)}); target >= 20,000: {'met' if rates[1] >= 20000 else 'MISSED'}"
    )
    proc, port = start("--ttft-ms", "50", "--tpot-ms", "20")
    try:
        for clients in (1, 64, 128, 256):
            s = asyncio.run(lateness(port, clients))
            verdict = ""
            if clients == 256:
                ok = s["p50_ms"] <= 1 and s["p99_ms"] <= 5
                verdict = f"; target p50 <= 1 ms, p99 <= 5 ms: {'met' if ok else 'MISSED'}"
            print(
                f"(b) {clients:>3} streams, TTFT 50 ms / TPOT 20 ms: first-token lateness p50 {s['p50_ms']:.2f} ms, "
                f"p99 {s['p99_ms']:.2f} ms, max {s['max_ms']:.2f} ms (n={s['count']}){verdict}"
            )
    finally:
        proc.terminate()
        proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
