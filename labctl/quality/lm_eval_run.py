"""labctl eval run RUN --suite lm-eval:TASK[,TASK…]: lm-evaluation-harness tasks against the run's endpoint
(its chat completions, as `local-chat-completions`), offline, with every sample kept beside the result.

The key goes to the harness as a request header of a model object labctl builds, never in `model_args` (which
the harness copies into its results); the thinking mode as the run's profile says (the same request fields as
labctl's own suites)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from labctl import __version__
from labctl.bench.bench_request import BenchRequest, check_engine_wait, check_names
from labctl.bench.client import Target
from labctl.bench.intervals import PASS_RATE_METHOD, wilson_interval
from labctl.bench.target import engine_key, preflight, resolve_target
from labctl.catalog.lab import Lab
from labctl.catalog.limits import MAX_CONCURRENCY, check_count, check_seconds
from labctl.compose.options import check_cache_dir
from labctl.errors import BadInput, LabctlError
from labctl.host.gpus.lock import engine_lock
from labctl.host.sandbox.launch import check_sandbox
from labctl.quality.evaluate import target_facts
from labctl.quality.lm_eval_env import FEWSHOT_AS_MULTITURN, FEWSHOT_SEED, configs, load_tasks, offline, quiet
from labctl.quality.tasks import TaskSet, data_files, dataset_sha256
from labctl.run.records.record import Record, now
from labctl.run.records.store import Runs, new_run_id, write_run_file

RESULT_SCHEMA = 1
HARNESS = "lm-evaluation-harness"
MAX_SAMPLE_CHARS = 64 * 1024  # one sample's input or output as kept; a longer one is cut and says so


def harness_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


def run_lm_eval(
    runs: Runs,
    lab: Lab,
    suite: str,
    request: BenchRequest,
    concurrency: int,
    timeout: float,
    cache_dir: str | None = None,
    progress: bool = False,
) -> tuple[dict[str, Any], Path]:
    """`progress`: the harness's own progress bars on stderr (a terminal watches)."""
    tasks = load_tasks(lab, suite)
    cache = check_cache_dir(cache_dir)
    files = {task.name: data_files(task, cache) for task in tasks}  # refused before the endpoint is asked
    check_names(request)
    check_count("--concurrency", concurrency, MAX_CONCURRENCY, "cases asked at once, one connection each")
    check_seconds("--timeout", timeout)
    check_engine_wait(request.wait_for_engine)
    target, record = resolve_target(runs, request)
    preflight(target)
    if any(task.sandboxed for task in tasks):
        check_sandbox()
    key = engine_key(record, target)
    with engine_lock(key, f"eval of {suite}", request.wait_for_engine, request.allow_shared_engine) as hold:
        return _evaluate(runs, suite, tasks, files, target, record, concurrency, timeout, hold.holder, progress)


def _model(target: Target, concurrency: int, timeout: float) -> Any:
    from lm_eval.models.openai_completions import LocalChatCompletion

    extras = target.chat_extras()

    class LabctlChat(LocalChatCompletion):  # type: ignore[misc]
        def _create_payload(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return {**super()._create_payload(*args, **kwargs), **extras}

    return LabctlChat(
        model=target.model,
        base_url=f"{target.base_url}/chat/completions",
        header={"Authorization": f"Bearer {target.api_key}"} if target.api_key else {},
        num_concurrent=concurrency,
        timeout=int(timeout),
        max_retries=2,
        think_end_token=None if target.thinking == "off" else "</think>",
    )


def _evaluate(
    runs: Runs,
    suite: str,
    tasks: list[TaskSet],
    files: dict[str, dict[str, Path]],
    target: Target,
    record: Record,
    concurrency: int,
    timeout: float,
    shared_with: str | None,
    progress: bool,
) -> tuple[dict[str, Any], Path]:
    with offline(progress), quiet():
        task_configs = configs(runs, tasks, files)
        import lm_eval
        from lm_eval.tasks import TaskManager

        try:
            out = lm_eval.simple_evaluate(
                model=_model(target, concurrency, timeout),
                # labctl's task sets are given whole: indexing the harness's thousands of own tasks takes seconds
                task_manager=TaskManager(include_defaults=False),
                tasks=task_configs,
                fewshot_random_seed=FEWSHOT_SEED,
                fewshot_as_multiturn=FEWSHOT_AS_MULTITURN,
                apply_chat_template=True,
                log_samples=True,
                bootstrap_iters=1000,
            )
        except Exception as exc:  # a third-party program's failure, of any type, is one line here
            said = str(exc)[:300].replace(target.api_key, "<key>") if target.api_key else str(exc)[:300]
            raise LabctlError(
                f"lm-evaluation-harness stopped ({type(exc).__name__}: {said}): the endpoint at {target.base_url} "
                "failed to answer, or a task's data or config is wrong. Nothing was recorded."
            ) from None
    if out is None:
        raise LabctlError("lm-evaluation-harness returned no results.")
    task_facts, cases, samples = [], [], []
    for task, config in zip(tasks, task_configs, strict=True):
        facts, task_cases, task_samples = _task_result(task, config["task"], files[task.name], out)
        task_facts.append(facts)
        cases += task_cases
        samples += task_samples
    if record.status == "external":
        runs.save(record)
    version = harness_version()
    eval_id = "e" + new_run_id()
    digest = _suite_digest(version, task_facts)
    passed = sum(1 for c in cases if c["passed"])
    result: dict[str, Any] = {
        "schema_version": RESULT_SCHEMA,
        "eval_id": eval_id,
        "run_id": record.run_id,
        "created_at": now(),
        "target": target_facts(record, target),
        "suite": {
            "name": suite,
            "version": ",".join(f"{t['name']}-{t['set_version']}" for t in task_facts),
            "sha256": digest,
            "full_version": f"{HARNESS} {version}: "
            + ", ".join(f"{t['task']} v{t['version']}" for t in task_facts)
            + f" +{digest[:12]}",
        },
        "harness": {"name": HARNESS, "version": version},
        "tasks": task_facts,
        "settings": {"concurrency": concurrency, "labctl_version": __version__, "timeout_s": timeout},
        "status": "complete",
        "score": passed / len(cases) if cases else None,
        "passed": passed,
        "total": len(cases),
        "score_ci95": wilson_interval(passed, len(cases)),
        "interval_method": PASS_RATE_METHOD,
        "cases": cases,
        "samples_file": f"{eval_id}.samples.jsonl",
    }
    if shared_with is not None:
        result["shared_engine"] = {"allowed": True, "holder": shared_with}
    folder = runs.dir(record.run_id) / "eval"
    write_run_file(folder / f"{eval_id}.samples.jsonl", "".join(json.dumps(s) + "\n" for s in samples))
    path = folder / f"{eval_id}.json"
    write_run_file(path, json.dumps(result, indent=1) + "\n")
    return result, path


def _suite_digest(version: str, tasks: list[dict[str, Any]]) -> str:
    """What must match for two evaluations to compare: the harness, each task's version, data and settings."""
    keep = (
        "name",
        "set_version",
        "task",
        "version",
        "dataset",
        "num_fewshot",
        "fewshot_as_multiturn",
        "fewshot_seed",
        "generation",
        "metric",
        "filter",
    )
    hashed = {"harness": version, "tasks": [{k: t[k] for k in keep} for t in tasks]}
    return hashlib.sha256(json.dumps(hashed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _task_result(
    task: TaskSet, harness_name: str, files: dict[str, Path], out: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    config = out["configs"][harness_name]
    metric = str(config["metric_list"][0]["metric"])
    filters = config.get("filter_list") or []
    filter_name = str(filters[0]["name"]) if filters else "none"
    scores = out["results"][harness_name]
    value = scores.get(f"{metric},{filter_name}")
    stderr = scores.get(f"{metric}_stderr,{filter_name}")
    facts = {
        "name": task.name,
        "set_version": task.version,
        "task": harness_name,
        "version": str(out["versions"].get(harness_name)),
        "dataset": {
            "source": task.source,
            "repo": task.repo,
            "revision": task.revision or "local",
            "format": task.format,
            "files": dict(sorted(task.files.items())),
            "sha256": dataset_sha256(files),
        },
        "num_fewshot": out["n-shot"].get(harness_name),
        "fewshot_as_multiturn": FEWSHOT_AS_MULTITURN,
        "fewshot_seed": FEWSHOT_SEED,
        "generation": config.get("generation_kwargs") or {},
        "metric": metric,
        "filter": filter_name,
        "value": value,
        "stderr": stderr if isinstance(stderr, float) else None,
        "samples": out["n-samples"][harness_name]["effective"],
    }
    cases, samples = [], []
    logged = [s for s in out["samples"][harness_name] if s.get("filter", filter_name) == filter_name]
    for sample in sorted(logged, key=lambda s: s["doc_id"]):
        score = sample.get(metric)
        output = _first(sample.get("resps"))
        case = {
            "id": f"{task.name}/{sample['doc_id']}",
            "check": metric,
            "passed": isinstance(score, int | float) and float(score) >= 1.0,
            "reason": f"{metric} {score} ({filter_name}: {_first(sample.get('filtered_resps'))!r})"[:300],
            "output": _cut(output),
            "target": _cut(str(sample.get("target"))),
        }
        cases.append(case)
        samples.append(
            {
                "task": task.name,
                "doc_id": sample["doc_id"],
                "input": _cut(_first(sample.get("arguments"))),
                "output": _cut(output),
                "filtered": _cut(_first(sample.get("filtered_resps"))),
                "target": _cut(str(sample.get("target"))),
                "score": score,
                "doc_hash": sample.get("doc_hash"),
            }
        )
    if not cases:
        raise BadInput(f"task set {task.name}: the harness gave no samples (is its test split empty?).")
    return facts, cases, samples


def _first(value: Any) -> str:
    while isinstance(value, list | tuple) and value:
        value = value[0]
    return "" if value is None else str(value)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SAMPLE_CHARS else text[:MAX_SAMPLE_CHARS] + " […cut]"
