"""labctl eval: run a quality suite against a run (or any endpoint) and keep the verdicts beside the
run's record, comparable case by case with another evaluation of the same suite."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from labctl import __version__
from labctl.bench.bench_request import MAX_ERROR_RATE, BenchRequest, check_engine_wait, check_names
from labctl.bench.client import Target
from labctl.bench.intervals import PASS_RATE_METHOD, wilson_interval
from labctl.bench.level_summary import PARTIAL_WARNING, every_request_failed
from labctl.bench.target import engine_key, engine_root, preflight, resolve_target
from labctl.catalog.limits import MAX_CONCURRENCY, check_count, check_seconds
from labctl.errors import BadInput, LabctlError
from labctl.host.engine.info import probe_engine_version
from labctl.host.gpus.lock import engine_lock
from labctl.host.sandbox.launch import check_sandbox, run_code
from labctl.quality.evals import find_eval as typed_eval
from labctl.quality.paired import Paired, pair, version_differences
from labctl.quality.suites import Case, Suite, check_versions, judge, strip_fence
from labctl.run.records.record import Record, now
from labctl.run.records.store import (
    Runs,
    new_run_id,
    write_run_file,
)

RESULT_SCHEMA = 1
# One answer's whole body: a suite answer is a few KiB; an endpoint sending more is not answering.
MAX_ANSWER_BYTES = 8 * 1024 * 1024
SANDBOX_PARALLEL = 2  # code cases at once: each is a container on a 2-core machine


async def _ask_all(
    target: Target, cases: list[Case], concurrency: int, timeout: float, tick: Callable[[], None]
) -> dict[str, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    limit = asyncio.Semaphore(concurrency)
    answers: dict[str, dict[str, Any]] = {}
    async with httpx.AsyncClient(
        timeout=timeout, headers=headers, limits=httpx.Limits(max_connections=concurrency)
    ) as client:

        async def ask(case: Case) -> None:
            settings = case.settings_for(target.thinking)
            body = {"model": target.model, "messages": case.messages, **settings, **target.chat_extras()}
            async with limit:
                try:
                    status, raw = await asyncio.wait_for(_post(client, target, body), timeout)
                    if status != 200:
                        answers[case.id] = {"error": f"HTTP {status}: {raw[:200].decode('utf-8', 'replace')}"}
                    else:
                        data = json.loads(raw)
                        message = data["choices"][0]["message"]
                        answer, inline_reasoning = split_reasoning(message.get("content") or "")
                        reasoning = message.get("reasoning_content") or message.get("reasoning") or inline_reasoning
                        usage = data.get("usage") or {}
                        finish = data["choices"][0].get("finish_reason")
                        thought = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
                        answers[case.id] = {
                            "output": answer,  # the answer is scored, never the reasoning before it
                            "finish_reason": finish,
                            "usage": usage,
                            "reasoning_chars": len(reasoning),
                            "reasoning_tokens": thought,
                            "max_tokens": settings["max_tokens"],
                            # max_tokens ran out mid-thought: no answer yet, and a wrong score that says why
                            "cut_off_while_reasoning": finish == "length"
                            and not answer.strip()
                            and bool(reasoning or thought),
                        }
                except TimeoutError:
                    answers[case.id] = {"error": f"no complete answer within {timeout:g} s"}
                except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
                    answers[case.id] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            tick()

        await asyncio.gather(*(ask(c) for c in cases))
    return answers


async def _post(client: httpx.AsyncClient, target: Target, body: dict[str, Any]) -> tuple[int, bytes]:
    """The status and at most MAX_ANSWER_BYTES of the body, read as it streams in."""
    raw = bytearray()
    async with client.stream("POST", f"{target.base_url}/chat/completions", json=body) as response:
        async for chunk in response.aiter_bytes():
            raw += chunk
            if len(raw) > MAX_ANSWER_BYTES:
                raise ValueError(f"an answer beyond the {MAX_ANSWER_BYTES // (1024 * 1024)} MiB bound")
    return response.status_code, bytes(raw)


def split_reasoning(content: str) -> tuple[str, str]:
    """(answer, reasoning): without a reasoning parser a thinking model's content starts with <think>…</think>."""
    stripped = content.lstrip()
    if stripped.startswith("<think>"):
        reasoning, closed, answer = stripped[len("<think>") :].partition("</think>")
        return (answer.strip(), reasoning) if closed else ("", reasoning)
    return content, ""


def grade(case: Case, answer: dict[str, Any]) -> dict[str, Any]:
    if "error" in answer:
        return {"passed": False, "reason": f"no answer: {answer['error']}"}
    if answer.get("cut_off_while_reasoning"):
        return {
            "passed": False,
            "reason": f"cut off while reasoning: max_tokens {answer.get('max_tokens')} ran out before any answer "
            "(give the suite a larger defaults.thinking_allowance, or run with thinking off)",
        }
    if case.check["kind"] == "python":
        ran = run_code(strip_fence(answer["output"]), case.check["tests"], case.check["timeout_s"])
        return {"passed": ran.passed, "reason": ran.reason}
    verdict = judge(case.check, answer["output"])
    return {"passed": verdict.passed, "reason": verdict.reason}


def target_facts(record: Record, target: Target) -> dict[str, Any]:
    """What an eval result says about what it asked: the endpoint, and the run behind it."""
    return {
        "base_url": target.base_url,
        "model": target.model,
        "engine": record.engine,
        "profile": record.profile,
        "environment_label": record.environment_label,
        "image_digest": record.image.digest,
        "thinking": target.thinking,
    }


def run_eval(
    runs: Runs,
    suite: Suite,
    request: BenchRequest,
    concurrency: int,
    timeout: float,
    progress: Callable[[int, int], None],
) -> tuple[dict[str, Any], Path]:
    check_names(request)
    check_count("--concurrency", concurrency, MAX_CONCURRENCY, "cases asked at once, one connection each")
    check_seconds("--timeout", timeout)
    check_engine_wait(request.wait_for_engine)
    target, record = resolve_target(runs, request)
    preflight(target)
    if record.status == "external":
        record = record.changed(engine_version=probe_engine_version(engine_root(target), target.api_key))
    if any(c.check["kind"] == "python" for c in suite.cases):
        check_sandbox()
    key = engine_key(record, target)  # one bench or eval per engine at a time
    with engine_lock(key, f"eval of {suite.name}", request.wait_for_engine, request.allow_shared_engine) as hold:
        return _evaluate(
            runs, suite, target, record, concurrency, timeout, progress, hold.holder, request.max_error_rate
        )


def _evaluate(
    runs: Runs,
    suite: Suite,
    target: Target,
    record: Record,
    concurrency: int,
    timeout: float,
    progress: Callable[[int, int], None],
    shared_with: str | None,
    max_error_rate: float = MAX_ERROR_RATE,
) -> tuple[dict[str, Any], Path]:
    done = {"n": 0}

    def tick() -> None:
        done["n"] += 1
        progress(done["n"], len(suite.cases) * 2)

    answers = asyncio.run(_ask_all(target, suite.cases, concurrency, timeout, tick))
    if all("error" in answer for answer in answers.values()):
        return _failed(runs, record, target, suite, concurrency, answers)

    def graded(case: Case) -> dict[str, Any]:
        verdict = grade(case, answers[case.id])
        tick()
        return verdict

    with ThreadPoolExecutor(max_workers=SANDBOX_PARALLEL) as pool:
        verdicts = list(pool.map(graded, suite.cases))
    cases = []
    for case, verdict in zip(suite.cases, verdicts, strict=False):
        cases.append(
            {
                "id": case.id,
                "check": case.check["kind"],
                "passed": verdict["passed"],
                "reason": verdict["reason"],
                "input": case.prompt,
                "target": case.reference,
                "settings": case.settings_for(target.thinking),
                **answers[case.id],
            }
        )
    passed = sum(1 for c in cases if c["passed"])
    if record.status == "external":
        runs.save(record)
    eval_id = "e" + new_run_id()
    result = {
        "schema_version": RESULT_SCHEMA,
        "eval_id": eval_id,
        "run_id": record.run_id,
        "created_at": now(),
        "target": target_facts(record, target),
        "suite": {
            "name": suite.name,
            "version": suite.version,
            "sha256": suite.sha256,
            "full_version": suite.full_version,
            "check_versions": check_versions(suite),
        },
        "settings": {"concurrency": concurrency, "labctl_version": __version__, "max_error_rate": max_error_rate},
        "status": "complete",
        "score": passed / len(cases),
        "passed": passed,
        "total": len(cases),
        "score_ci95": wilson_interval(passed, len(cases)),
        "cut_off_while_reasoning": sum(1 for c in cases if c.get("cut_off_while_reasoning")),
        "interval_method": PASS_RATE_METHOD,
        "cases": cases,
    }
    unanswered = sum(1 for c in cases if "error" in c)
    if unanswered / len(cases) > max_error_rate:  # the engine or the link failed, not the model's answers
        result["status"] = "partial"
        result["warnings"] = [
            f"{PARTIAL_WARNING}: {unanswered}/{len(cases)} cases got no answer (HTTP, transport or timeout errors: "
            f"{unanswered / len(cases):.0%}, above --max-error-rate {max_error_rate:.0%}); the score counts them "
            "as failed, so it says less about the model than about the endpoint"
        ]
    result["unanswered"] = unanswered
    if shared_with is not None:  # --allow-shared-engine: another bench or eval measured the engine meanwhile
        result["shared_engine"] = {"allowed": True, "holder": shared_with}
    path = runs.dir(record.run_id) / "eval" / f"{eval_id}.json"
    write_run_file(path, json.dumps(result, indent=1) + "\n")
    return result, path


def _failed(
    runs: Runs, record: Any, target: Target, suite: Suite, concurrency: int, answers: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], Path]:
    """No case got an answer: kept for the record with status failed and no score, then refused."""
    if record.status == "external":
        runs.save(record)
    eval_id = "e" + new_run_id()
    result = {
        "schema_version": RESULT_SCHEMA,
        "eval_id": eval_id,
        "run_id": record.run_id,
        "created_at": now(),
        "target": {"base_url": target.base_url, "model": target.model, "engine": record.engine},
        "suite": {
            "name": suite.name,
            "version": suite.version,
            "sha256": suite.sha256,
            "full_version": suite.full_version,
        },
        "settings": {"concurrency": concurrency, "labctl_version": __version__},
        "status": "failed",
        "score": None,
        "passed": 0,
        "total": len(suite.cases),
        "cases": [{"id": case.id, "passed": False, **answers[case.id]} for case in suite.cases],
    }
    path = runs.dir(record.run_id) / "eval" / f"{eval_id}.json"
    write_run_file(path, json.dumps(result, indent=1) + "\n")
    failures = Counter(str(answer["error"])[:120] for answer in answers.values())
    raise LabctlError(every_request_failed(dict(failures), "cases asked", path))


def find_eval(runs: Runs, eval_id: str) -> dict[str, Any]:
    return typed_eval(runs, eval_id).data  # checked by its typed loader


def diff_evals(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    for side in (a, b):
        if side.get("status") == "partial":
            raise BadInput(
                f"evaluation {side['eval_id']} is partial: {side.get('unanswered', '?')} of its cases got no answer "
                "from the endpoint, so its verdicts are not the model's. Run the evaluation again."
            )
        if side.get("status", "complete") != "complete":
            raise BadInput(f"evaluation {side['eval_id']} {side['status']}: it has no verdicts to compare.")
    if a["suite"]["sha256"] != b["suite"]["sha256"]:
        raise BadInput(
            f"{a['eval_id']} used suite {a['suite']['name']} {a['suite']['full_version']} and {b['eval_id']} "
            f"{b['suite']['name']} {b['suite']['full_version']}: results compare only within one suite version "
            f"({'; '.join(version_differences(a, b)[:3])})."
        )
    before = {c["id"]: c for c in a["cases"]}
    flips = []
    for case in b["cases"]:
        old = before.get(case["id"])
        if old is not None and old["passed"] != case["passed"]:
            flips.append(
                {
                    "id": case["id"],
                    "was": "pass" if old["passed"] else "fail",
                    "now": "pass" if case["passed"] else "fail",
                    "reason": case["reason"],
                    "output_was": old.get("output", old.get("error", "")),
                    "output_now": case.get("output", case.get("error", "")),
                }
            )
    return flips


def paired_evals(a: dict[str, Any], b: dict[str, Any]) -> Paired:
    """The paired statistic of two evaluations `diff_evals` accepted (same version, complete)."""
    return pair(a["cases"], b["cases"])
