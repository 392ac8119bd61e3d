#!/usr/bin/env python3
"""A plain TCP forwarder: accept on LISTEN (host:port), pipe each connection to TARGET (host:port).

remote-lab.sh runs two of them so that the lab registry on 127.0.0.1:5000 of the main network
namespace answers on 127.0.0.1:5000 inside the `labb` namespace too (labb 127.0.0.1:5000 ->
10.201.0.1:5000 -> main 127.0.0.1:5000): image references stay identical on both hosts.
Standard library only; one asyncio loop; stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys


def split_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def handle(target: tuple[str, int], client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
    try:
        upstream_r, upstream_w = await asyncio.wait_for(asyncio.open_connection(*target), timeout=10)
    except (TimeoutError, OSError) as exc:
        print(f"forward: cannot reach {target[0]}:{target[1]}: {exc}", file=sys.stderr, flush=True)
        client_w.close()
        return
    try:
        await asyncio.gather(pipe(client_r, upstream_w), pipe(upstream_r, client_w))
    finally:
        for w in (client_w, upstream_w):
            w.close()


async def serve(listen: tuple[str, int], target: tuple[str, int], pidfile: str | None) -> None:
    server = await asyncio.start_server(lambda r, w: handle(target, r, w), *listen, reuse_address=True)
    if pidfile:
        with open(pidfile, "w", encoding="ascii") as handle_:
            handle_.write(f"{os.getpid()}\n")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"forward: {listen[0]}:{listen[1]} -> {target[0]}:{target[1]}", flush=True)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=split_address, required=True, help="HOST:PORT to accept on")
    parser.add_argument("--target", type=split_address, required=True, help="HOST:PORT to connect to")
    parser.add_argument("--pidfile", help="write this process's pid here once listening")
    args = parser.parse_args()
    asyncio.run(serve(args.listen, args.target, args.pidfile))


if __name__ == "__main__":
    main()
