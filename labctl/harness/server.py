"""The harness engine's HTTP server: stdlib asyncio, HTTP/1.1 keep-alive, SSE over chunked encoding.

Why not a framework: the image carries only the standard library, and a thin asyncio server keeps
per-token cost and scheduling error small enough to measure clients against (make bench-harness).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import random
import signal
import sys
import time
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

from labctl import __version__
from labctl.harness import vllm_surface
from labctl.harness.logprobs import AnswerIndex, completion_logprobs
from labctl.harness.model import Answer, Schedule, Settings, make_answer, stable_seed
from labctl.harness.persona_http import (
    Reply,
    metrics_text,
    models_reply,
    persona_reply,
    trtllm_iteration_stats,
    unauthorized,
)
from labctl.harness.protocol import (
    REASONS,
    HttpError,
    error_body,
    parse_head,
    parse_request,
    usage_of,
)
from labctl.harness.stepper import Stepper, StreamJob, frame

if TYPE_CHECKING:
    from labctl.harness.personas import Persona

# A thinking model's reasoning, emitted before the answer when a reasoning parser separates it.
REASONING = ["Okay,", " the", " user", " asks", " a", " question.", " Let", " me", " think", " briefly."]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


class Harness:
    def __init__(self, settings: Settings, persona: Persona | None = None) -> None:
        self.s = settings
        self.persona = persona
        self.loop = asyncio.get_running_loop()
        self.opened_at = 0.0
        self.slots = asyncio.Semaphore(settings.max_num_seqs)
        self.arrived = 0
        self.running = 0
        self.waiting = 0
        self.counters = {
            "requests_total": 0,
            "requests_success_total": 0,
            "requests_failed_total": 0,
            "prompt_tokens_total": 0,
            "generation_tokens_total": 0,
            "streams_dropped_total": 0,
        }
        self.lateness: deque[float] = deque(maxlen=200_000)
        self.first_tokens: deque[tuple[str, float]] = deque(maxlen=200_000)
        self.rng = random.Random(settings.seed)
        self.created = int(time.time())
        self.arrived_at = 0.0
        self.stepper = Stepper()
        self.answer_index = AnswerIndex(settings.answers)
        # The vLLM persona answers in vLLM's shapes: thinking in `reasoning`, the finish reason on the last
        # token's chunk, reasoning tokens in usage whenever a parser is set, a system fingerprint.
        self.vllm = persona is not None and persona.engine == "vllm" and persona.version_tuple() >= (0, 11)
        self.reasoning_field = "reasoning" if self.vllm else "reasoning_content"
        self.fingerprint = f"vllm-{persona.version}-labctl-persona" if self.vllm and persona else None

    # --- lifecycle -------------------------------------------------------------------------------
    async def serve(self) -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, stop.set)  # PID 1 in a container ignores SIGTERM otherwise
        if self.persona is not None:
            for warning in self.persona.warnings:
                # the engine's own warning text is the quoted part of the contract checker's finding
                quoted = warning.split('"')[1] if warning.count('"') >= 2 else f"(labctl persona) {warning}"
                print(f"WARNING {quoted}", file=sys.stderr, flush=True)
            log(f"persona {self.persona.engine} {self.persona.version}: the harness answering as that engine")
        log(f"loading model {self.s.model} (cold start {self.s.cold_start:g} s; port {self.s.port} closed)")
        try:
            await asyncio.wait_for(stop.wait(), timeout=self.s.cold_start)
            return
        except TimeoutError:
            pass
        if self.s.fail_on_start:
            log("fault: failing during start-up (--fail-on-start)")
            # As an engine dies: its cause first, then the shutdown chatter that buries it in the log's tail.
            log("ValueError: the harness engine refuses to start (--fail-on-start)")
            for worker in range(30):
                log(f"shutting down worker {worker}")
            sys.exit(3)
        # Fewer, later collections: a full GC pass in the middle of a burst shows up as token lateness.
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
        server = await asyncio.start_server(self.handle, self.s.host, self.s.port, backlog=2048, limit=64 * 1024)
        self.opened_at = self.loop.time()
        log(f"serving {self.s.model} on http://{self.s.host}:{self.s.port} (warm-up {self.s.warmup:g} s)")
        async with server:
            await stop.wait()
        log("stopping")

    def ready(self) -> bool:
        return not self.s.never_ready and self.loop.time() >= self.opened_at + self.s.warmup

    # --- HTTP ------------------------------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    async with asyncio.timeout(self.s.header_timeout):
                        head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    await self.send_json(writer, 431, error_body(431, "request headers too large"), close=True)
                    return
                try:
                    method, path, headers = parse_head(head)
                except HttpError as exc:
                    await self.send_json(writer, exc.status, error_body(exc.status, exc.message), close=True)
                    return
                body = b""
                if "content-length" in headers:
                    try:
                        length = int(headers["content-length"])
                        if length < 0:
                            raise ValueError
                    except ValueError:
                        await self.send_json(writer, 400, error_body(400, "bad Content-Length"), close=True)
                        return
                    if length > self.s.max_body_bytes:
                        message = f"request body of {length} bytes exceeds the limit of {self.s.max_body_bytes}"
                        await self.send_json(writer, 413, error_body(413, message), close=True)
                        return
                    try:
                        async with asyncio.timeout(self.s.header_timeout):
                            body = await reader.readexactly(length)
                    except (asyncio.IncompleteReadError, ConnectionError):
                        return
                    except TimeoutError:
                        await self.send_json(
                            writer, 408, error_body(408, "request body not received in time"), close=True
                        )
                        return
                elif "chunked" in headers.get("transfer-encoding", ""):
                    await self.send_json(writer, 411, error_body(411, "send a Content-Length"), close=True)
                    return
                keep_alive = headers.get("connection", "").lower() != "close"
                self.arrived_at = self.loop.time()
                await self.route(method, path.split("?", 1)[0], headers, body, writer)
                if not keep_alive or writer.is_closing():
                    return
        finally:
            writer.close()

    async def send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        content_type: str,
        close: bool = False,
        extra: str = "",
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}\r\ncontent-type: {content_type}\r\n"
            f"content-length: {len(body)}\r\n{extra}"
        )
        if close:
            head += "connection: close\r\n"
        writer.write(head.encode() + b"\r\n" + body)
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def send_json(self, writer: asyncio.StreamWriter, status: int, obj: Any, close: bool = False) -> None:
        await self.send(writer, status, json.dumps(obj).encode(), "application/json", close=close)

    async def route(
        self, method: str, path: str, headers: dict[str, str], body: bytes, writer: asyncio.StreamWriter
    ) -> None:
        try:
            if self.persona is not None:
                if self.persona.guards(path) and not self.key_ok(headers, self.persona.api_keys):
                    await self.send_reply(writer, unauthorized(self.persona))
                    return
                if self.vllm and await self.vllm_route(method, path, body, writer, headers):
                    return
                reply = (
                    persona_reply(self.persona, path, self.ready(), self.s.max_model_len) if method == "GET" else None
                )
                if path == "/v1/models" and method == "GET":
                    reply = models_reply(self.persona, self.created, self.s.max_model_len)
                elif path == "/metrics" and method == "GET" and self.persona.engine == "trtllm":
                    reply = trtllm_iteration_stats()
                elif path == self.persona.metrics_path and method == "GET":
                    if not self.persona.serves_metrics:
                        raise HttpError(404, "Not Found")
                    text = metrics_text(
                        self.persona, self.counters, self.running, self.waiting, self.s.max_num_seqs, self.created
                    )
                    reply = Reply(200, text.encode(), "text/plain; version=0.0.4")
                if reply is not None:
                    await self.send_reply(writer, reply)
                    return
            elif path.startswith("/v1/") and not self.key_ok(headers, self.s.api_keys):
                raise HttpError(401, "Unauthorized: missing or wrong API key")
            if path == "/health":
                self.expect(method, "GET")
                if self.ready():
                    await self.send_json(writer, 200, {"status": "ready", "model": self.s.model})
                else:
                    await self.send_json(writer, 503, {"status": "loading"})
            elif path == "/v1/models":
                self.expect(method, "GET")
                await self.send_json(
                    writer,
                    200,
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": self.s.model,
                                "object": "model",
                                "created": self.created,
                                "owned_by": "labctl-harness",
                                "root": self.s.model,
                                "max_model_len": self.s.max_model_len,
                            }
                        ],
                    },
                )
            elif path == "/version" and self.persona is None:
                self.expect(method, "GET")
                await self.send_json(
                    writer, 200, {"version": f"labctl-harness {__version__}", "revision": self.s.revision}
                )
            elif path == "/metrics":
                self.expect(method, "GET")
                await self.send(writer, 200, self.metrics().encode(), "text/plain; version=0.0.4")
            elif path == "/harness/first-tokens":
                # When each stream's first token was written (CLOCK_MONOTONIC s), by X-Request-Id: a
                # client on this machine subtracts it from when it received that token (its receive lag).
                if method == "DELETE":
                    self.first_tokens.clear()
                    await self.send_json(writer, 200, {"cleared": True})
                else:
                    await self.send_json(writer, 200, dict(self.first_tokens))
            elif path == "/harness/lateness":
                if method == "DELETE":
                    self.lateness.clear()
                    await self.send_json(writer, 200, {"cleared": True})
                else:
                    await self.send_json(writer, 200, self.lateness_summary())
            elif path in ("/tokenize", "/detokenize", "/tokenizer_info") and self.persona is None:
                await self.tokenizer_route(method, path, body, writer)
            elif path in ("/v1/chat/completions", "/v1/completions"):
                self.expect(method, "POST")
                await self.complete(path == "/v1/chat/completions", body, writer, headers.get("x-request-id", ""))
            else:
                raise HttpError(404, f"no route {path}")
        except HttpError as exc:
            if exc.status >= 400 and path in ("/v1/chat/completions", "/v1/completions"):
                self.counters["requests_failed_total"] += 1
            await self.send_json(writer, exc.status, error_body(exc.status, exc.message, exc.param, exc.kind))

    @staticmethod
    def expect(method: str, wanted: str) -> None:
        if method != wanted:
            raise HttpError(405, f"method {method} not allowed; use {wanted}")

    @staticmethod
    def key_ok(headers: dict[str, str], keys: list[str]) -> bool:
        if not keys:
            return True
        auth = headers.get("authorization", "")
        return auth.startswith("Bearer ") and auth[7:] in keys

    async def tokenizer_route(self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter) -> None:
        """The tokenizer's routes, as vLLM serves them (lm-eval's remote tokenizer reads them)."""
        if path == "/tokenizer_info":
            self.expect(method, "GET")
            await self.send_json(writer, 200, vllm_surface.tokenizer_info_reply(self.s.max_model_len))
            return
        self.expect(method, "POST")
        if path == "/tokenize":
            await self.send_json(writer, 200, vllm_surface.tokenize_reply(body, self.s.max_model_len))
        else:
            await self.send_json(writer, 200, vllm_surface.detokenize_reply(body, self.s))

    async def send_reply(self, writer: asyncio.StreamWriter, reply: Reply) -> None:
        if reply.delay:
            await asyncio.sleep(reply.delay)
        await self.send(writer, reply.status, reply.body, reply.content_type)

    async def vllm_route(
        self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter, headers: dict[str, str]
    ) -> bool:
        """vLLM's routes besides completions, models, health, version and metrics; False when not one."""
        answer: Any = None
        if path == "/ping" and method in ("GET", "POST"):
            await self.send(writer, 200, b"", "application/json")
            return True
        if method == "GET" and path == "/docs":
            await self.send(writer, 200, vllm_surface.DOCS, "text/html; charset=utf-8")
            return True
        if method == "POST" and path == "/invocations":  # SageMaker's entry: chat or completion by the body
            await self.complete(vllm_surface.is_chat(body), body, writer, headers.get("x-request-id", ""))
            return True
        tokenizer_info = self.persona is not None and self.persona.tokenizer_info
        if method == "GET":
            answer = {
                "/load": lambda: {"server_load": self.running + self.waiting},
                "/kv_event_sources": dict,
                "/openapi.json": lambda: vllm_surface.openapi(tokenizer_info),
            }.get(path, lambda: None)()
            if path == "/tokenizer_info" and tokenizer_info:
                answer = vllm_surface.tokenizer_info_reply(self.s.max_model_len)
        elif path == "/tokenize":
            answer = vllm_surface.tokenize_reply(body, self.s.max_model_len)
        elif path == "/detokenize":
            answer = vllm_surface.detokenize_reply(body, self.s)
        elif path == "/is_scaling_elastic_ep":
            answer = {"is_scaling_elastic_ep": False}
        if answer is not None:
            await self.send_json(writer, 200, answer)
            return True
        if vllm_surface.not_simulated(method, path):
            raise HttpError(501, f"labctl persona: vLLM serves {method} {path}; the persona does not act it out")
        return False

    # --- completions -----------------------------------------------------------------------------
    async def complete(self, chat: bool, body: bytes, writer: asyncio.StreamWriter, request_id: str = "") -> None:
        # The latency model counts from the request's arrival, as a client sees it. Yield once so that
        # every request of a burst is stamped before any of them is parsed: parsing is part of the
        # simulated prefill, not a queue in front of it.
        arrived = self.arrived_at
        await asyncio.sleep(0)
        if self.s.crash_after and self.arrived >= self.s.crash_after:
            log(f"fault: crashing at request {self.arrived + 1} (--crash-after {self.s.crash_after})")
            os._exit(1)
        self.arrived += 1
        self.counters["requests_total"] += 1
        if not self.ready():
            raise HttpError(503, "the engine is warming up; retry shortly")
        request = parse_request(body, chat, self.s)
        request["request_id"] = request_id[:128]
        if self.s.error_rate and self.rng.random() < self.s.error_rate:
            raise HttpError(503, "injected fault: service unavailable (--error-rate)")
        thinking = request["thinking"] if request["thinking"] is not None else self.s.thinking_default
        reasoning = REASONING[: request["max_tokens"] // 2] if chat and self.s.reasoning and thinking else []
        budget = request["max_tokens"] - len(reasoning)
        prompts = ["".join(p) for p in request["prompt_pieces"]] or [request["prompt"]]  # a batch: one answer each
        answers = [make_answer(self.s, p, budget, request["ignore_eos"], request["seed"]) for p in prompts]
        if reasoning:
            answers[0] = Answer(reasoning + answers[0].tokens, answers[0].finish_reason, len(reasoning))
        queued = self.slots.locked()
        self.waiting += 1
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            start = self.loop.time() if queued else arrived  # a queued request's prefill starts when admitted
            schedule = Schedule(
                self.s,
                start,
                request["prompt_tokens"],
                random.Random(stable_seed(self.s.seed, request["seed"], request["prompt"], self.arrived)),
            )
            if request["stream"]:
                await self.stream(chat, request, answers[0], schedule, writer)
            else:
                await self.respond(chat, request, answers, schedule, writer)
        finally:
            self.running -= 1
            self.slots.release()

    def _count(self, request: dict[str, Any], answer_tokens: int) -> None:
        self.counters["requests_success_total"] += 1
        self.counters["prompt_tokens_total"] += request["prompt_tokens"]
        self.counters["generation_tokens_total"] += answer_tokens

    async def respond(
        self,
        chat: bool,
        request: dict[str, Any],
        answers: list[Answer],
        schedule: Schedule,
        writer: asyncio.StreamWriter,
    ) -> None:
        due = schedule.first
        for _ in range(max(len(a.tokens) for a in answers) - 1):  # a batch's sequences decode side by side
            due += schedule.gap(self.running)
        await asyncio.sleep(max(0.0, due - self.loop.time()))
        self.lateness.append(self.loop.time() - due)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        generated = sum(len(a.tokens) for a in answers)
        usage: dict[str, Any] = usage_of(request, generated)
        if chat:
            answer = answers[0]
            message: dict[str, Any] = {"role": "assistant", "content": "".join(answer.tokens[answer.reasoning :])}
            if answer.reasoning:
                message[self.reasoning_field] = "".join(answer.tokens[: answer.reasoning])
            if answer.reasoning or (self.vllm and self.s.reasoning):
                usage["completion_tokens_details"] = {"reasoning_tokens": answer.reasoning}
            choices = [{"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish_reason}]
            obj = "chat.completion"
        else:
            choices = [
                self.completion_choice(index, request, pieces, answer)
                for index, (pieces, answer) in enumerate(zip(request["prompt_pieces"], answers, strict=True))
            ]
            obj = "text_completion"
        self._count(request, generated)
        reply = {"id": rid, "object": obj, "created": int(time.time()), "model": self.s.model, "choices": choices}
        if self.fingerprint:
            reply["system_fingerprint"] = self.fingerprint
        await self.send_json(writer, 200, reply | {"usage": usage})

    def completion_choice(
        self, index: int, request: dict[str, Any], prompt_pieces: list[str], answer: Answer
    ) -> dict[str, Any]:
        """One prompt's choice: with `echo` its text begins with the prompt, with `logprobs` each token's figures."""
        text = "".join(answer.tokens)
        logprobs = None
        if request["logprobs"] is not None:
            echoed = prompt_pieces if request["echo"] else None
            logprobs = completion_logprobs(self.s, self.answer_index, echoed, answer.tokens, request["logprobs"])
        if request["echo"]:
            text = "".join(prompt_pieces) + text
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": answer.finish_reason}

    async def stream(
        self, chat: bool, request: dict[str, Any], answer: Answer, schedule: Schedule, writer: asyncio.StreamWriter
    ) -> None:
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        if chat:
            head = json.dumps(
                {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self.s.model}
            )[:-1]
            prefix = (head + ',"choices":[{"index":0,"delta":{"content":').encode()
            thought = (head + f',"choices":[{{"index":0,"delta":{{"{self.reasoning_field}":').encode()
            suffix = b'},"logprobs":null,"finish_reason":null}]}'
            last = b'},"logprobs":null,"finish_reason":%b}]}' % json.dumps(answer.finish_reason).encode()
        else:
            head = json.dumps({"id": rid, "object": "text_completion", "created": created, "model": self.s.model})[:-1]
            prefix = (head + ',"choices":[{"index":0,"text":').encode()
            thought = prefix
            suffix = b',"logprobs":null,"finish_reason":null}]}'
            last = b',"logprobs":null,"finish_reason":%b}]}' % json.dumps(answer.finish_reason).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        if chat:  # real engines open with a role-only chunk that carries no token
            role = (
                head
                + ',"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'
            )
            writer.write(frame(b"data: " + role.encode() + b"\n\n"))
        drop_at = -1
        if self.s.drop_stream_rate and self.rng.random() < self.s.drop_stream_rate:
            drop_at = max(1, len(answer.tokens) // 2)
        tokens = answer.tokens
        job = StreamJob(
            writer, tokens, prefix, suffix, schedule.first, lambda: schedule.gap(self.running), self.lateness, drop_at
        )
        job.thought, job.thinking = thought, answer.reasoning
        if self.vllm:
            job.last_suffix = last
        if request["request_id"]:
            job.request_id, job.first_log = request["request_id"], self.first_tokens
        self.stepper.add(job)
        outcome = await job.finished
        if outcome == "dropped":
            self.counters["streams_dropped_total"] += 1
        if outcome != "complete":
            return
        tail: list[dict[str, Any]] = []
        if self.vllm:
            pass  # the last token's chunk carried the finish reason
        elif chat:
            tail.append(
                {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": self.s.model,
                    "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": answer.finish_reason}],
                }
            )
        else:
            tail.append(
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": self.s.model,
                    "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": answer.finish_reason}],
                }
            )
        if request["include_usage"]:
            usage: dict[str, Any] = usage_of(request, len(tokens))
            if self.vllm and chat and self.s.reasoning:
                usage["completion_tokens_details"] = {"reasoning_tokens": answer.reasoning}
            closing: dict[str, Any] = {
                "id": rid,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created,
                "model": self.s.model,
                "choices": [],
                "usage": usage,
            }
            if self.fingerprint:
                closing["system_fingerprint"] = self.fingerprint
            tail.append(closing)
        data = b"".join(b"data: " + json.dumps(t).encode() + b"\n\n" for t in tail) + b"data: [DONE]\n\n"
        self._count(request, len(tokens))
        writer.write(frame(data) + b"0\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    # --- observability ---------------------------------------------------------------------------
    def metrics(self) -> str:
        lines = []
        for name, value in self.counters.items():
            lines += [f"# TYPE harness_{name} counter", f'harness_{name}{{model_name="{self.s.model}"}} {value}']
        for name, value in (("num_requests_running", self.running), ("num_requests_waiting", self.waiting)):
            lines += [f"# TYPE harness_{name} gauge", f'harness_{name}{{model_name="{self.s.model}"}} {value}']
        return "\n".join(lines) + "\n"

    def lateness_summary(self) -> dict[str, Any]:
        values = list(self.lateness)
        return {
            "count": len(values),
            "p50_ms": _percentile(values, 50) * 1000,
            "p99_ms": _percentile(values, 99) * 1000,
            "max_ms": max(values, default=0.0) * 1000,
        }


def log(text: str) -> None:
    print(f"harness: {text}", flush=True)


async def run(settings: Settings, persona: Persona | None = None) -> None:
    await Harness(settings, persona).serve()
