"""A tiny OpenAI-shaped server on loopback that misbehaves on purpose (stdlib only)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()


ANSWER = json.dumps(
    {"choices": [{"message": {"role": "assistant", "content": "no idea"}, "finish_reason": "stop"}], "usage": {}}
).encode()


def _handler(mode: str) -> type[BaseHTTPRequestHandler]:
    posts = iter(range(1_000_000))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if mode != "huge-models":
                self._send(200, MODELS)
                return
            # valid JSON that lists the model, padded to 64 MiB with more "models"
            pad = b',{"id": "' + b"x" * 1000 + b'"}'
            count = 64 * 1024
            body_len = len(MODELS) + len(pad) * count
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(body_len))
            self.end_headers()
            try:
                self.wfile.write(MODELS[:-2])
                for _ in range(count):
                    self.wfile.write(pad)
                self.wfile.write(MODELS[-2:])
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if mode == "hang":
                time.sleep(3600)
            with lock:
                number = next(posts)
            if mode == "wrong" or (mode == "flaky" and number % 2):
                self._send(200, ANSWER)
                return
            body = json.dumps({"error": {"message": "the engine is on fire", "type": "server_error"}}).encode()
            if mode == "huge-error":
                body = b'{"error": {"message": "' + b"x" * (64 * 1024 * 1024) + b'"}}'
            self._send(500, body)

    return Handler


@contextmanager
def hostile_server(mode: str) -> Iterator[str]:
    """Yields the base URL (…/v1). Modes: fail (every POST answers 500), flaky (every other POST answers 500,
    the rest a wrong answer), wrong (every POST a wrong answer), huge-models (a 64 MiB model list),
    huge-error (a 64 MiB error body), hang (POSTs never answer)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(mode))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
