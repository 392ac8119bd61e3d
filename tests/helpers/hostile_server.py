"""A tiny OpenAI-shaped server on loopback that misbehaves on purpose (stdlib only)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
VLLM_VERSION = "0.32.0"
THINKING_TOKENS = 300  # how long the vllm-thinking model reasons before it answers
GAP_S = 0.01  # between a vLLM-like stream's chunks: long enough to time, short enough for a test


ANSWER = json.dumps(
    {"choices": [{"message": {"role": "assistant", "content": "no idea"}, "finish_reason": "stop"}], "usage": {}}
).encode()


def _vllm_stream(body: dict[str, object], chat: bool, mode: str) -> list[dict[str, object]]:
    """The events of a vLLM 0.32 stream, as measured on the real server: a chat stream opens with a role chunk
    whose content is "", every token is one chunk, a special token (under ignore_eos) is a chunk whose text is
    "", the finish_reason rides on the last token's chunk, and usage comes last with no choices."""
    n = int(str(body.get("max_tokens") or 4))
    texts = ["" for _ in range(n)] if mode == "vllm-empty" else ["a"] * (n - 1) + [""]
    head: dict[str, object] = {"id": "x", "object": "chat.completion.chunk" if chat else "text_completion"}
    events: list[dict[str, object]] = []
    if chat:
        events.append(head | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    for i, text in enumerate(texts):
        finish = "length" if i == n - 1 else None
        choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
        events.append(head | {"choices": [choice | {"finish_reason": finish}]})
    usage = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3}
    events.append(head | {"choices": [], "usage": usage})
    return events


def _handler(mode: str, api_key: str | None) -> type[BaseHTTPRequestHandler]:
    posts = iter(range(1_000_000))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            # as uvicorn does: without it Nagle holds each small chunk until the client's delayed ACK (40 ms)
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _refused(self) -> bool:
            """vLLM's key check: /v1/* needs `Authorization: Bearer KEY`; the rest stays open."""
            if api_key is None or not self.path.startswith("/v1/"):
                return False
            if self.headers.get("Authorization") == f"Bearer {api_key}":
                return False
            self._send(401, json.dumps({"error": "Unauthorized"}).encode())
            return True

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self._refused():
                return
            if mode.startswith("vllm") and self.path == "/version":
                self._send(200, json.dumps({"version": VLLM_VERSION}).encode())
                return
            if mode != "huge-models":
                self._send(
                    200 if self.path.endswith("/models") else 404, MODELS if self.path.endswith("/models") else b"{}"
                )
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
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self._refused():
                return
            if mode == "vllm-thinking":
                self._think(json.loads(raw))
                return
            if mode.startswith("vllm"):
                self._stream(json.loads(raw), self.path.endswith("/chat/completions"))
                return
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

        def _think(self, body: dict[str, object]) -> None:
            """A thinking model behind `--reasoning-parser qwen3`: THINKING_TOKENS of reasoning, then the answer;
            a smaller max_tokens ends it mid-thought (finish_reason length, content empty)."""
            budget = int(str(body.get("max_tokens") or 16))
            done = budget > THINKING_TOKENS
            message = {"role": "assistant", "content": "42" if done else "", "reasoning": "17 and 25 make..."}
            thought = min(budget, THINKING_TOKENS)
            usage = {
                "prompt_tokens": 9,
                "completion_tokens": thought + (1 if done else 0),
                "completion_tokens_details": {"reasoning_tokens": thought},
            }
            choice = {"index": 0, "message": message, "finish_reason": "stop" if done else "length"}
            self._send(
                200, json.dumps({"id": "x", "object": "chat.completion", "choices": [choice], "usage": usage}).encode()
            )

        def _stream(self, body: dict[str, object], chat: bool) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in [*_vllm_stream(body, chat, mode), None]:
                data = b"data: " + (json.dumps(event).encode() if event else b"[DONE]") + b"\n\n"
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
                time.sleep(GAP_S)
            self.wfile.write(b"0\r\n\r\n")

    return Handler


@contextmanager
def hostile_server(mode: str, api_key: str | None = None) -> Iterator[str]:
    """Yields the base URL (…/v1). Modes: fail (every POST answers 500), flaky (every other POST answers 500,
    the rest a wrong answer), wrong (every POST a wrong answer), huge-models (a 64 MiB model list),
    huge-error (a 64 MiB error body), hang (POSTs never answer), and three that stream as vLLM 0.32 does
    (with /version): vllm-special (text tokens, then a special token whose text is ""), vllm-empty (every
    token's text is ""), and vllm-thinking (non-streamed: it reasons THINKING_TOKENS tokens, then answers "42").
    With api_key, /v1/* answers 401 without that key, as vLLM's --api-key does."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(mode, api_key))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
