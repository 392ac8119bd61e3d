"""A lean reference client for `make bench-client`: what a load generator with nothing but the essentials measures,
to hold labctl's against. N streams, each its own keep-alive HTTP/1.1 connection over raw asyncio sockets, send
streamed chat completions one after another until the requests run out (closed loop, as labctl's); each request's
send time and the arrival of its first token-bearing chunk are CLOCK_MONOTONIC (time.perf_counter on Linux), its
chunks counted. No retries, no telemetry, no JSON beyond finding the first chunk with content.

    python scripts/reference_client.py --url http://127.0.0.1:PORT --model M --concurrency N --requests R
        --input-len 128 --output-len 64 --out FILE

writes one JSON line per request (request_id, sent, first, chunks, ok) to FILE and prints the client's CPU seconds
and wall seconds as one JSON object."""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from urllib.parse import urlsplit


def body(model: str, input_len: int, output_len: int, index: int) -> bytes:
    words = " ".join(f"w{index}x{i}" for i in range(input_len))  # its own prompt: no prefix shared with another
    return json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": words}],
            "max_tokens": output_len,
            "ignore_eos": True,
            "stream": True,
            "temperature": 0.0,
        }
    ).encode()


async def stream(reader: asyncio.StreamReader) -> tuple[float | None, int]:
    """The response's first content chunk's arrival and how many content chunks came (chunked transfer, SSE)."""
    while (await reader.readline()) not in (b"\r\n", b""):  # status line and headers
        pass
    first, chunks, pending = None, 0, b""
    while True:
        size = int((await reader.readline()).strip() or b"0", 16)
        if size == 0:
            await reader.readline()
            return first, chunks
        pending += await reader.readexactly(size)
        await reader.readexactly(2)
        *events, pending = pending.split(b"\n\n")
        for event in events:
            if event.startswith(b"data: {") and b'"content":"' in event and b'"content":""' not in event:
                chunks += 1
                if first is None:
                    first = time.perf_counter()


async def main(args: argparse.Namespace) -> None:
    url = urlsplit(args.url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    queue = list(range(args.requests))
    lines: list[str] = []

    async def worker(stream_index: int) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while queue:
                index = queue.pop()
                payload = body(args.model, args.input_len, args.output_len, index)
                request_id = f"ref-{index}"
                head = (
                    f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
                    f"x-request-id: {request_id}\r\ncontent-length: {len(payload)}\r\n\r\n"
                ).encode()
                sent = time.perf_counter()
                writer.write(head + payload)
                await writer.drain()
                first, chunks = await stream(reader)
                ok = first is not None and chunks == args.output_len
                lines.append(
                    json.dumps({"request_id": request_id, "sent": sent, "first": first, "chunks": chunks, "ok": ok})
                )
        finally:
            writer.close()

    started, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.gather(*(worker(i) for i in range(args.concurrency)))
    used = resource.getrusage(resource.RUSAGE_SELF)
    with open(args.out, "w") as out:
        out.write("\n".join(lines) + "\n")
    seconds = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
    print(json.dumps({"cpu_s": seconds, "wall_s": time.perf_counter() - started}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, kind in (("--url", str), ("--model", str), ("--concurrency", int), ("--requests", int)):
        parser.add_argument(name, type=kind, required=True)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--out", required=True)
    asyncio.run(main(parser.parse_args()))
