"""A resident real vLLM on CPU with an API key, one server for the module, its model thinking by default: the key
fails closed on /v1, and eval records the reasoning yet scores only the content, with thinking on and off."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import httpx
import pytest
from helpers.real_engine import RealLab, real_lab

pytestmark = [pytest.mark.docker, pytest.mark.real_engine]

PROFILE = "tiny-qwen3-thinking"
SHIPPED_ALLOWANCE, ALLOWANCE = 2048, 32


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLab]:
    lab = real_lab(tmp_path_factory.mktemp("real-resident"))
    lab.add_profile(PROFILE, model_thinking="on", description="tiny-qwen3, thinking unless a request says not to")
    suite = lab.lab / "suites" / "short-answer" / "suite.yaml"  # a random model thinks to the end: keep it short
    suite.write_text(
        suite.read_text().replace(f"thinking_allowance: {SHIPPED_ALLOWANCE}", f"thinking_allowance: {ALLOWANCE}")
    )
    yield lab
    lab.down_all()


@pytest.fixture(scope="module")
def resident(real: RealLab) -> tuple[dict[str, str], str]:
    info = real.up(PROFILE, "--resident", "--keys", "1")
    share = real.labctl("share", info["run_id"], "--json")
    assert share.code == 0, share.stderr
    return info, str(json.loads(share.stdout)["api_key"])


def test_the_key_fails_closed_on_v1(resident: tuple[dict[str, str], str]) -> None:
    info, key = resident
    base = info["base_url"]
    assert httpx.get(f"{base}/models", timeout=10).status_code == 401
    wrong = {"Authorization": "Bearer sk-not-the-key"}
    assert httpx.get(f"{base}/models", headers=wrong, timeout=10).status_code == 401
    body = {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    assert httpx.post(f"{base}/chat/completions", json=body, timeout=30).status_code == 401
    assert httpx.post(f"{base}/chat/completions", json=body, headers=wrong, timeout=30).status_code == 401
    right = {"Authorization": f"Bearer {key}"}
    models = httpx.get(f"{base}/models", headers=right, timeout=10)
    assert models.status_code == 200 and [m["id"] for m in models.json()["data"]] == ["tiny-qwen3"]
    assert httpx.post(f"{base}/chat/completions", json=body, headers=right, timeout=30).status_code == 200


# Each walks onto an open route (/health, vLLM's readiness) from a guarded one, or the reverse, as written.
WALKS = (
    "/metrics/../health", "/health/../metrics", "/x/../health", "/metrics/%2e%2e/health", "/metrics/%2E%2E/health",
    "/health/%2e%2e/metrics", "/%2e%2e/health", "//health", "//metrics", "/metrics%2f..%2fhealth",
    "/metrics%2F..%2Fhealth", "/health/..%2fmetrics", "/METRICS", "/Health/../health", "/./health",
    "/health/./../metrics", "/health\\..\\metrics",
)  # fmt: skip


def raw(base: str, method: str, path: str) -> tuple[int, str]:
    """The request with its path exactly as written (httpx would normalise the dot segments first)."""
    host, port = base.removeprefix("http://").split("/")[0].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
        connection.request(method, path, body=body if method == "POST" else None)
        answer = connection.getresponse()
        return answer.status, answer.read().decode(errors="replace")
    finally:
        connection.close()


def test_the_proxy_forwards_only_the_path_its_key_check_saw(resident: tuple[dict[str, str], str]) -> None:
    """vLLM's open routes are /health (readiness) and, on its own port, /metrics and /invocations: through the
    proxy no dot segment, doubled or encoded slash or case trick reaches the metrics or the model without a key."""
    info, _ = resident
    root = info["base_url"].removesuffix("/v1")
    assert raw(root, "GET", "/health")[0] == 200
    assert raw(root, "GET", "/metrics")[0] == 401
    for path in WALKS:
        code, text = raw(root, "GET", path)
        assert code in (400, 401, 404) and "vllm:" not in text, (path, code, text[:200])
    for path in ("/health/../invocations", "/health/%2e%2e/invocations", "//invocations", "/health%2f..%2finvocations"):
        code, text = raw(root, "POST", path)
        assert code in (400, 401, 404) and "choices" not in text, (path, code, text[:200])


def test_eval_with_thinking_on_records_the_reasoning_and_scores_the_content(
    real: RealLab, resident: tuple[dict[str, str], str]
) -> None:
    info, _ = resident
    done = real.labctl("eval", "run", info["run_id"], "--suite", "short-answer", "--json")
    assert done.code == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["target"]["thinking"] == "on"
    cases = result["cases"]
    assert cases and all("error" not in c for c in cases)
    assert all(c["reasoning_tokens"] > 0 and c["reasoning_chars"] > 0 for c in cases), cases[0]
    assert {c["max_tokens"] for c in cases} == {16 + ALLOWANCE}  # the suite gave the thinking model room
    for case in cases:  # the scored output is the content alone; an empty one cut off mid-thought says so
        cut_off = case["finish_reason"] == "length" and not case["output"].strip()
        assert case["cut_off_while_reasoning"] is cut_off
        assert not case["passed"] or case["output"].strip()
    assert result["cut_off_while_reasoning"] == sum(1 for c in cases if c["cut_off_while_reasoning"])


def test_eval_with_thinking_off_asks_each_request_not_to_think(
    real: RealLab, resident: tuple[dict[str, str], str]
) -> None:
    info, key = resident
    done = real.labctl(
        "eval",
        "run",
        "--base-url",
        info["base_url"],
        "--model",
        "tiny-qwen3",
        "--api-key-env",
        "TINY_KEY",
        "--thinking",
        "off",
        "--suite",
        "short-answer",
        "--json",
        env={"TINY_KEY": key},
    )
    assert done.code == 0, done.stderr
    cases = json.loads(done.stdout)["cases"]
    assert cases and all("error" not in c for c in cases)
    assert all(c["reasoning_chars"] == 0 and not c["reasoning_tokens"] for c in cases), cases[0]
    assert all(not c["cut_off_while_reasoning"] for c in cases)


def test_an_lm_eval_task_runs_against_the_real_engine_with_its_key_and_no_file_holds_the_key(
    real: RealLab, resident: tuple[dict[str, str], str]
) -> None:
    info, key = resident
    done = real.labctl("eval", "run", info["run_id"], "--suite", "lm-eval:instructions-verifiable", "--json")
    assert done.code == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    [task] = result["tasks"]
    assert task["dataset"]["sha256"] and result["harness"]["name"] and result["target"]["thinking"] == "on"
    samples = (real.home / "runs" / info["run_id"] / "eval" / f"{result['eval_id']}.samples.jsonl").read_text()
    assert len(samples.splitlines()) == result["total"] == 10  # every case kept, whatever a random model answers
    run = real.home / "runs" / info["run_id"]
    written = [run / "record.json", *(run / "eval").iterdir()]
    assert [p.name for p in written if key.encode() in p.read_bytes()] == []  # records, results and samples
