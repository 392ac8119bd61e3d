"""A registry front on loopback that answers 503 to the manifest requests of its first pulls and forwards
everything else to the lab registry: a pull flake, for real, for the real Docker daemon. A pull starts with
Docker's `GET /v2/` ping, which is how pulls are counted."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM = ("127.0.0.1", 5000)


class Front(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, failing: int) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.failing, self.seen, self.pulls, self.failed = failing, [], 0, 0
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    server: Front

    def log_message(self, *_args: object) -> None:
        pass

    def _forward(self) -> None:
        with self.server.lock:
            self.server.seen.append((self.command, self.path))
            if self.command == "GET" and self.path == "/v2/":
                self.server.pulls += 1
            fail = "/manifests/" in self.path and self.server.pulls <= self.server.failing
            self.server.failed += fail
        if fail:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        upstream = http.client.HTTPConnection(*UPSTREAM, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        upstream.request(self.command, self.path, body=body, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        upstream.close()

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = _forward


@contextmanager
def flaky_registry(failing: int) -> Iterator[Front]:
    front = Front(failing)
    thread = threading.Thread(target=front.serve_forever, daemon=True)
    thread.start()
    try:
        yield front
    finally:
        front.shutdown()
        front.server_close()
