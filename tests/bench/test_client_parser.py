"""The bench client's HTTP/SSE parser, fed real byte sequences: split at every position, and hostile."""

from __future__ import annotations

import json

import pytest

from labctl.bench.client import RequestResult, _Response, reconcile


def sse(*events: dict[str, object]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def chunked(body: bytes, size: int = 7) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
TOKEN = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
THINK = {"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]}
USAGE = {"choices": [], "usage": {"completion_tokens": 3, "prompt_tokens": 5}}
STREAM = HEAD + chunked(sse(ROLE, THINK, TOKEN, TOKEN, USAGE))


def feed_all(pieces: list[bytes]) -> RequestResult:
    result = RequestResult()
    response = _Response(result, stream=True, chat=True)
    for n, piece in enumerate(pieces):
        response.feed(piece, float(n))
    assert response.done
    return result


def test_whole_stream_counts_tokens_not_the_role_chunk() -> None:
    result = feed_all([STREAM])
    assert result.error is None
    assert result.output_tokens == 3 and result.prompt_tokens == 5 and result.usage_reported
    assert len(result.chunk_times) == 3  # reasoning + 2 content chunks; the role-only chunk is not a token


def test_split_at_every_byte_gives_the_same_answer() -> None:
    for cut in range(1, len(STREAM)):
        result = feed_all([STREAM[:cut], STREAM[cut:]])
        assert (result.error, result.output_tokens, len(result.chunk_times)) == (None, 3, 3), f"split at byte {cut}"


def test_byte_by_byte() -> None:
    result = feed_all([bytes([b]) for b in STREAM])
    assert result.error is None and len(result.chunk_times) == 3
    assert result.first_token is not None and result.first_token > 0  # stamped when its last byte arrived


def test_crlf_separated_events_are_events() -> None:
    body = sse(ROLE, TOKEN, USAGE).replace(b"\n", b"\r\n")
    result = feed_all([HEAD + chunked(body)])
    assert result.error is None and len(result.chunk_times) == 1


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b"data: {not json}\n\n", "unparseable"),
        (b"data: [1, 2]\n\n", "not a JSON object"),
        (b'data: {"error": {"message": "boom"}}\n\n', "error event"),
        (b'data: {"choices": "x"}\n\n', "not a JSON object"),
    ],
)
def test_malformed_events_are_failures_with_a_reason(payload: bytes, reason: str) -> None:
    result = feed_all([HEAD + chunked(payload + sse(TOKEN))])
    assert result.error is not None and reason in result.error


@pytest.mark.parametrize(
    "head",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n",  # latin-1 superscript two: isdigit() but not int()
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\n\x1f\x8b\x08\x00",
    ],
)
def test_hostile_heads_fail_cleanly(head: bytes) -> None:
    result = RequestResult()
    response = _Response(result, stream=True, chat=True)
    response.feed(head, 0.0)
    assert response.done and result.error


def test_bad_chunk_size_fails_cleanly() -> None:
    result = RequestResult()
    response = _Response(result, stream=True, chat=True)
    response.feed(HEAD + b"zz\r\nhello\r\n", 0.0)
    assert response.done and result.error and "chunk" in result.error


def test_endless_headers_are_bounded() -> None:
    result = RequestResult()
    response = _Response(result, stream=True, chat=True)
    for _ in range(100):
        response.feed(b"X-Pad: " + b"a" * 1000 + b"\r\n", 0.0)
        if response.done:
            break
    assert response.done and result.error and "header" in result.error


def test_an_event_without_end_is_bounded() -> None:
    result = RequestResult()
    response = _Response(result, stream=True, chat=True)
    response.feed(HEAD, 0.0)
    for _ in range(40):
        response.feed(chunked(b"data: " + b"x" * 100_000, size=100_006)[:-5], 0.0)
        if response.done:
            break
    assert response.done and result.error and "bound" in result.error


def test_error_status_reads_the_message() -> None:
    body = json.dumps({"error": {"message": "model not found"}}).encode()
    result = RequestResult()
    response = _Response(result, stream=True, chat=True)
    response.feed(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n" % len(body) + body, 0.0)
    assert response.done and result.error == "HTTP 404: model not found"


# vLLM 0.32, measured: a special token streams as a chunk whose text is "", and the finish_reason rides on it
SPECIAL = {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "length"}]}
TOOL = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}}]}
REASONING = {"choices": [{"index": 0, "delta": {"reasoning": "so"}}]}
FINISH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


def finished(*events: dict[str, object], chat: bool = True) -> RequestResult:
    """A stream parsed and reconciled with its usage, as Connection.send does once it is done."""
    result = RequestResult()
    response = _Response(result, stream=True, chat=chat)
    body = HEAD + chunked(sse(*events))
    for n in range(len(body)):
        response.feed(body[n : n + 1], float(n))
    assert response.done and result.error is None
    reconcile(result, float(len(body)))
    return result


def usage(n: int) -> dict[str, object]:
    return {"choices": [], "usage": {"completion_tokens": n, "prompt_tokens": 5}}


def test_tokens_without_text_are_timed_as_tokens() -> None:
    result = finished(ROLE, TOKEN, TOKEN, SPECIAL, usage(3))
    assert len(result.chunk_times) == 3 and not result.chunks_unlike_usage
    assert result.chunk_times[-1] > result.chunk_times[1]  # E2E ends at the special token, not the last text


def test_a_request_made_only_of_tokens_without_text_has_a_ttft_and_an_e2e() -> None:
    empty = {"choices": [{"index": 0, "delta": {"content": ""}}]}
    result = finished(ROLE, empty, empty, SPECIAL, usage(3))
    assert result.first_token is not None and len(result.chunk_times) == 3 and not result.chunks_unlike_usage


def test_reasoning_and_tool_call_deltas_are_tokens() -> None:
    result = finished(ROLE, REASONING, TOOL, TOOL, usage(3))
    assert len(result.chunk_times) == 3 and not result.chunks_unlike_usage


def test_a_bare_finish_chunk_past_the_usage_count_is_not_a_token() -> None:
    result = finished(ROLE, TOKEN, TOKEN, FINISH, usage(2))  # SGLang and the harness end so
    assert len(result.chunk_times) == 2 and not result.chunks_unlike_usage
    text = {"choices": [{"index": 0, "text": "a"}]}
    closing = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
    completion = finished(text, text, closing, usage(2), chat=False)
    assert len(completion.chunk_times) == 2 and not completion.chunks_unlike_usage
    special = finished(text, text, closing, usage(3), chat=False)  # here the empty text was a token
    assert len(special.chunk_times) == 3 and not special.chunks_unlike_usage


def test_chunks_that_differ_from_usage_are_flagged_not_dropped() -> None:
    result = finished(ROLE, TOKEN, TOKEN, usage(5))  # several tokens in one chunk
    assert result.chunks_unlike_usage and len(result.chunk_times) == 2 and result.output_tokens == 5
    nothing = finished(ROLE, usage(4))  # no chunk to time: first and last token at the stream's end
    assert nothing.first_token is not None and nothing.chunk_times == [nothing.first_token]
    assert nothing.chunks_unlike_usage
