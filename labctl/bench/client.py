"""A lean streaming client for OpenAI-compatible servers: asyncio protocols over keep-alive HTTP/1.1,
chunked decoding and byte-level SSE parsing, one timestamp per socket read.

Why not httpx: its async pool costs ~140 µs of CPU per streamed chunk and distorts TTFT at high
concurrency (shared/reference/benchmarking.md); this path costs a few µs per chunk."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import ssl
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

# Bumped whenever a change here can move a measured number (timestamps, parsing, what counts as a token):
# a study's fingerprint covers it, so a cell measured by another client is measured again.
CLIENT_VERSION = "1"
perf = time.perf_counter
_PID = os.getpid()
_REQUEST_IDS = itertools.count()


@dataclass
class Target:
    base_url: str  # ends in /v1
    model: str
    api_key: str | None = None
    thinking: str | None = None  # "off": every chat request asks the template not to think
    key_from: str | None = None  # where the key came from, for the message when it is refused

    def chat_extras(self) -> dict[str, Any]:
        """Request fields that keep the setup's thinking mode (vLLM, SGLang, TensorRT-LLM and Atlas read them)."""
        return {"chat_template_kwargs": {"enable_thinking": False}} if self.thinking == "off" else {}

    @property
    def parts(self) -> tuple[str, int, bool, str]:
        url = urlsplit(self.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"{self.base_url!r} is not an http(s) URL")
        tls = url.scheme == "https"
        return url.hostname, url.port or (443 if tls else 80), tls, url.path.rstrip("/")


@dataclass
class RequestResult:
    ok: bool = False
    error: str | None = None
    scheduled: float = 0.0  # when the request was due (open loop); queue time = sent - scheduled
    dispatched: float = 0.0  # when the open-loop sender let it go: its own lag = dispatched - scheduled
    sent: float = 0.0
    first_token: float | None = None
    # arrivals of token-bearing chunks: every chunk with a choice after the role chunk, text or not (a special
    # token streams as content "", a tool call as tool_calls)
    chunk_times: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int | None = None
    usage_reported: bool = False
    input_len: int = 0
    request_id: str = ""  # sent as X-Request-Id (engines log it; the harness engine can log its first token's time)
    # the last timed chunk carried no text and a finish_reason: a finish marker or an empty final token; usage decides
    last_chunk_bare: bool = False
    # a stream whose timed chunks are not its usage's completion tokens (several tokens in one chunk, a finish
    # chunk counted, or none timed): flagged in the per-request file and counted per level, never left out
    chunks_unlike_usage: bool = False


MAX_HEAD = 64 * 1024
MAX_EVENT = 1024 * 1024
MAX_BODY = 8 * 1024 * 1024  # a whole (non-streamed or error) body: an answer or an error is never this long
_STATUS_LINE = re.compile(r"HTTP/1\.[01] ([1-5][0-9][0-9])(?: .*)?\Z")
_HEX = re.compile(rb"[0-9a-fA-F]{1,15}")


class _Malformed(Exception):
    """The server's bytes are not what HTTP/1.1 and SSE allow: the request fails, with this reason."""


class _Response:
    """Parses one HTTP response as bytes arrive: status line, headers, chunked or sized body, SSE events."""

    def __init__(self, result: RequestResult, stream: bool, chat: bool) -> None:
        self.result, self.stream, self.chat = result, stream, chat
        self.head = b""
        self.status = 0
        self.chunked = False
        self.remaining: int | None = None  # bytes left of a sized body
        self.chunk_left = 0  # data bytes left in the current chunk
        self.crlf_pending = False  # the CRLF closing the current chunk is still to come
        self.done_at = 0.0
        self.raw = bytearray()  # undecoded chunked framing
        self.body = bytearray()  # decoded body not yet consumed
        self.done = False
        self.keep_alive = True
        self.headers_done = False

    def feed(self, data: bytes, now: float) -> None:
        if self.done:
            return
        try:
            self._feed(data, now)
        except _Malformed as exc:
            self.result.error = str(exc)
            self.done, self.keep_alive = True, False

    def _feed(self, data: bytes, now: float) -> None:
        if not self.headers_done:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                if len(self.head) > MAX_HEAD:
                    raise _Malformed(f"response headers beyond the {MAX_HEAD // 1024} KiB bound")
                return
            self._headers(self.head[:end].decode("latin-1"))
            data = self.head[end + 4 :]
            self.head = b""
        if self.chunked:
            self.raw += data
            self._dechunk()
        else:
            self.body += data
            if self.remaining is not None:
                self.remaining -= len(data)
                if self.remaining <= 0:
                    self.done = True
        self._consume(now)

    def _headers(self, text: str) -> None:
        lines = text.split("\r\n")
        status = _STATUS_LINE.match(lines[0])
        if status is None:
            raise _Malformed(f"not an HTTP/1.1 status line: {lines[0][:60]!r}")
        self.status = int(status.group(1))
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == "transfer-encoding" and "chunked" in value:
                self.chunked = True
            elif name == "content-length":
                if not re.fullmatch(r"[0-9]{1,15}", value):
                    raise _Malformed(f"a Content-Length that is not a number: {value[:30]!r}")
                self.remaining = int(value)
            elif name == "content-encoding" and value not in ("", "identity"):
                raise _Malformed(f"an unrequested Content-Encoding {value[:30]!r} (labctl asks for none)")
            elif name == "connection" and value == "close":
                self.keep_alive = False
        self.headers_done = True
        if self.remaining == 0:
            self.done = True

    def _dechunk(self) -> None:
        raw = self.raw
        pos = 0
        while pos < len(raw):
            if self.chunk_left:
                take = min(self.chunk_left, len(raw) - pos)
                self.body += raw[pos : pos + take]
                pos += take
                self.chunk_left -= take
                continue
            if self.crlf_pending:
                if len(raw) - pos < 2:
                    break
                pos += 2
                self.crlf_pending = False
                continue
            eol = raw.find(b"\r\n", pos)
            if eol < 0:
                if len(raw) - pos > 1024:
                    raise _Malformed("a chunk-size line beyond 1 KiB")
                break
            size_text = raw[pos:eol].split(b";", 1)[0].strip()
            if not _HEX.fullmatch(size_text):
                raise _Malformed(f"a malformed chunk size {bytes(size_text[:20])!r}")
            size = int(size_text, 16)
            pos = eol + 2
            if size == 0:
                self.done = True
                pos = len(raw)
                break
            self.chunk_left, self.crlf_pending = size, True
        del raw[:pos]

    def _consume(self, now: float) -> None:
        if self.status != 200 or not self.stream:
            if len(self.body) > MAX_BODY:
                raise _Malformed(f"a response body beyond the {MAX_BODY // (1024 * 1024)} MiB bound")
            if self.done:
                self._finish_plain()
            return
        body = self.body
        if b"\r" in body:  # SSE allows CRLF line ends; a lone CR at the end waits for its LF
            body[:] = body.replace(b"\r\n", b"\n")
        start = 0
        while True:
            end = body.find(b"\n\n", start)
            if end < 0:
                break
            self._event(bytes(body[start:end]), now)
            start = end + 2
        del body[:start]
        if len(body) > MAX_EVENT:
            raise _Malformed(f"an SSE event beyond the {MAX_EVENT // 1024} KiB bound")

    def _event(self, event: bytes, now: float) -> None:
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue  # comments (":") and other fields
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return
            try:
                obj = json.loads(payload)
            except ValueError:
                raise _Malformed(f"unparseable SSE event: {payload[:80]!r}") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("choices", []), list):
                raise _Malformed(f"an SSE event that is not a JSON object with a choices list: {payload[:80]!r}")
            if "error" in obj and not obj.get("choices"):
                self.result.error = f"error event: {str(obj['error'])[:160]}"
                return
            usage = obj.get("usage")
            if usage:
                self.result.output_tokens = int(usage.get("completion_tokens") or 0)
                self.result.prompt_tokens = usage.get("prompt_tokens")
                self.result.usage_reported = True
            choices = obj.get("choices") or []
            if choices and isinstance(choices[0], dict) and _carries_token(choices[0], self.chat):
                if self.result.first_token is None:
                    self.result.first_token = now
                self.result.chunk_times.append(now)
                self.result.last_chunk_bare = not _has_text(choices[0], self.chat) and bool(
                    choices[0].get("finish_reason")
                )

    def _finish_plain(self) -> None:
        text = bytes(self.body).decode("utf-8", "replace")
        if self.status != 200:
            try:
                message = json.loads(text).get("error", {}).get("message", text)
            except (ValueError, AttributeError):
                message = text
            self.result.error = f"HTTP {self.status}: {str(message)[:200]}"
            return
        try:
            obj = json.loads(text)
        except ValueError:
            self.result.error = "unparseable JSON response"
            return
        usage = obj.get("usage") or {}
        self.result.output_tokens = int(usage.get("completion_tokens") or 0)
        self.result.prompt_tokens = usage.get("prompt_tokens")
        self.result.usage_reported = bool(usage)


_TOKEN_FIELDS = ("content", "reasoning_content", "reasoning")


def _carries_token(choice: dict[str, Any], chat: bool) -> bool:
    """A chunk that carries a token, whether it has text or not: vLLM streams a special token as content "".
    Only the role chunk that opens a chat stream (role, and no text) and a delta with nothing in it are not."""
    if not chat:
        return isinstance(choice.get("text"), str)
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False
    if delta.get("role"):
        return _has_text(choice, chat)
    return any(isinstance(delta.get(name), str) for name in _TOKEN_FIELDS) or bool(delta.get("tool_calls"))


def _has_text(choice: dict[str, Any], chat: bool) -> bool:
    if not chat:
        return bool(choice.get("text"))
    delta = choice.get("delta") or {}
    return any(delta.get(name) for name in _TOKEN_FIELDS) or bool(delta.get("tool_calls"))


def reconcile(result: RequestResult, done_at: float) -> None:
    """A finished stream's timed chunks against its usage: a bare finish chunk one past the usage count (or in a
    stream without usage) was a finish marker, not a token; a stream with no timed chunk has its first and last
    token at its last byte; any other difference is flagged (TPOT and E2E stand on usage and the last chunk; ITL
    pools the gaps there were)."""
    times = result.chunk_times
    if result.last_chunk_bare and (not result.usage_reported or len(times) == result.output_tokens + 1):
        times.pop()
        result.first_token = times[0] if times else None
    if not times:
        result.first_token = done_at
        times.append(done_at)
    if result.usage_reported:
        result.chunks_unlike_usage = len(times) != result.output_tokens


class _Protocol(asyncio.Protocol):
    """Stamps each read the moment it arrives and parses it a moment later: when many streams are
    readable at once, every one of them is stamped before any of them is parsed."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.response: _Response | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.lost = False
        self.pending: list[tuple[float, bytes]] = []
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.pending:
            self.loop.call_soon(self._parse)
        self.pending.append((perf(), data))

    def _parse(self) -> None:
        pending, self.pending = self.pending, []
        response = self.response
        if response is None:
            return
        for now, data in pending:
            try:
                response.feed(data, now)
            except (ValueError, IndexError) as exc:
                response.result.error = f"malformed HTTP response: {exc}"
                response.done = True
            if response.done:
                if self.waiter and not self.waiter.done():
                    response.done_at = now
                    self.waiter.set_result(None)
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.pending:
            self._parse()
        if self.waiter and not self.waiter.done():
            self.waiter.set_result(None)


class Connection:
    """One keep-alive connection, reopened when the server closes it."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.host, self.port, self.tls, self.prefix = target.parts
        self.protocol: _Protocol | None = None

    async def _ensure(self) -> _Protocol:
        if self.protocol is None or self.protocol.lost:
            loop = asyncio.get_running_loop()
            context = ssl.create_default_context() if self.tls else None
            _, protocol = await loop.create_connection(_Protocol, self.host, self.port, ssl=context)
            self.protocol = protocol
        return self.protocol

    def close(self) -> None:
        if self.protocol and self.protocol.transport:
            self.protocol.transport.close()

    async def send(
        self, body: dict[str, Any], chat: bool, result: RequestResult, timeout: float | None
    ) -> RequestResult:
        stream = bool(body.get("stream"))
        path = f"{self.prefix}/{'chat/completions' if chat else 'completions'}"
        payload = json.dumps(body).encode()
        auth = f"authorization: Bearer {self.target.api_key}\r\n" if self.target.api_key else ""
        result.request_id = result.request_id or f"labctl-{_PID}-{next(_REQUEST_IDS)}"
        auth += f"x-request-id: {result.request_id}\r\n"
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\ncontent-type: application/json\r\n"
            f"accept: {'text/event-stream' if stream else 'application/json'}\r\n{auth}"
            f"content-length: {len(payload)}\r\n\r\n"
        ).encode()
        try:
            protocol = await self._ensure()
        except OSError as exc:
            result.error = f"connect failed: {exc.strerror or exc}"
            return result
        response = _Response(result, stream, chat)
        protocol.response = response
        protocol.waiter = asyncio.get_running_loop().create_future()
        result.sent = perf()
        assert protocol.transport is not None
        protocol.transport.write(head + payload)
        try:
            await asyncio.wait_for(protocol.waiter, timeout)
        except TimeoutError:
            result.error = f"no complete answer within {timeout:g} s"
            self.close()
            self.protocol = None
            return result
        finally:
            protocol.response = None
        if not response.done:
            got = len(result.chunk_times)
            result.error = result.error or (
                f"stream dropped after {got} token chunks"
                if response.headers_done
                else "connection closed before a response"
            )
        elif response.status != 200 and result.error is None:
            response._finish_plain()
        if not response.keep_alive or protocol.lost or not response.done:
            self.close()
            self.protocol = None
        if result.error is None:
            if not stream:  # no chunks to time: the whole answer is the first and the last token
                result.first_token = response.done_at
                result.chunk_times = [response.done_at]
            else:
                reconcile(result, response.done_at)
            if not result.usage_reported:
                result.output_tokens = len(result.chunk_times)  # fallback: flagged in the metrics
            result.ok = True
        return result
