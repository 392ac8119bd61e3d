"""labctl eval run RUN --suite lm-eval:TASK[,TASK…]: lm-evaluation-harness tasks against the run's endpoint,
offline, with every sample kept beside the result. Generated answers go through its chat completions (as
`local-chat-completions`, the chat template the engine's); log-likelihood tasks (multiple choice) through its
completions with log-probabilities (as `local-completions`, tokenized by the engine's own /tokenize), the way
lm-eval users run them: no chat template, few-shot examples as one text. `--limit N` asks each task's first N
documents only: a smoke run, recorded so, never compared with a full one.

The key goes to the harness as a request header of a model object labctl builds, never in `model_args` (which
the harness copies into its results); the thinking mode as the run's profile says (the same request fields as
labctl's own suites)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
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
from labctl.quality.lm_eval_env import (
    FEWSHOT_AS_MULTITURN,
    FEWSHOT_SEED,
    LOGLIKELIHOOD,
    configs,
    load_tasks,
    offline,
    quiet,
    unobserved,
)
from labctl.quality.tasks import TaskSet, data_files, dataset_sha256
from labctl.run.records.record import Record, now
from labctl.run.records.store import Runs, new_run_id, write_run_file

RESULT_SCHEMA = 1
HARNESS = "lm-evaluation-harness"
MAX_SAMPLE_CHARS = 64 * 1024  # one sample's input or output as kept; a longer one is cut and says so
MAX_LIMIT = 100_000


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
    limit: int | None = None,
) -> tuple[dict[str, Any], Path]:
    """`progress`: the harness's own progress bars on stderr (a terminal watches); `limit`: a smoke run of each
    task's first documents."""
    tasks = load_tasks(lab, suite)
    cache = check_cache_dir(cache_dir)
    files = {task.name: data_files(task, cache) for task in tasks}  # refused before the endpoint is asked
    if limit is not None:
        check_count("--limit", limit, MAX_LIMIT, "documents of each task (a smoke run)")
    check_names(request)
    check_count("--concurrency", concurrency, MAX_CONCURRENCY, "cases asked at once, one connection each")
    check_seconds("--timeout", timeout)
    check_engine_wait(request.wait_for_engine)
    with offline(progress=False), quiet():
        task_configs = configs(runs, tasks, files)  # read once: the kinds now, the evaluation later
        kinds = {
            t.name: str(c.get("output_type") or "generate_until") for t, c in zip(tasks, task_configs, strict=True)
        }
    target, record = resolve_target(runs, request)
    preflight(target)
    scored = [name for name, kind in kinds.items() if kind in LOGLIKELIHOOD]
    if scored:
        check_logprob_support(target, scored)
    if any(task.sandboxed for task in tasks):
        check_sandbox()
    key = engine_key(record, target)
    run = Evaluation(suite, tasks, files, task_configs, kinds, concurrency, timeout, limit)
    with engine_lock(key, f"eval of {suite}", request.wait_for_engine, request.allow_shared_engine) as hold:
        return _evaluate(runs, run, target, record, hold.holder, progress)


@dataclass(frozen=True)
class Evaluation:
    suite: str
    tasks: list[TaskSet]
    files: dict[str, dict[str, list[Path]]]
    configs: list[dict[str, Any]]  # the harness's task configs, data files pointed at `files`
    kinds: dict[str, str]  # each task's output type
    concurrency: int
    timeout: float
    limit: int | None


def check_logprob_support(target: Target, tasks: list[str]) -> None:
    """A log-likelihood task needs the engine's tokenizer (/tokenizer_info, /tokenize): refused before asking."""
    from lm_eval.utils import check_remote_tokenizer_support

    if not check_remote_tokenizer_support(f"{target.base_url}/completions", auth_token=target.api_key, max_retries=1):
        raise BadInput(
            f"{', '.join(tasks)} score log-likelihoods through the engine's completions, tokenized by the engine's "
            f"own tokenizer, but {target.base_url.removesuffix('/v1')} answers no /tokenizer_info or /tokenize "
            "(vLLM serves them with --enable-tokenizer-info-endpoint). Nothing was asked."
        )


def _scoring_model(target: Target, concurrency: int, timeout: float) -> Any:
    """Log-likelihoods through /v1/completions (echo, logprobs), the engine's own tokenizer counting tokens."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    return LocalCompletionsAPI(
        model=target.model,
        base_url=f"{target.base_url}/completions",
        tokenizer_backend="remote",
        auth_token=target.api_key or None,
        header={"Authorization": f"Bearer {target.api_key}"} if target.api_key else {},
        num_concurrent=concurrency,
        timeout=int(timeout),
        max_retries=2,
    )


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
    runs: Runs, run: Evaluation, target: Target, record: Record, shared_with: str | None, progress: bool
) -> tuple[dict[str, Any], Path]:
    with offline(progress), quiet():
        task_configs = run.configs
        generated = [c for t, c in zip(run.tasks, task_configs, strict=True) if run.kinds[t.name] not in LOGLIKELIHOOD]
        scored = [c for t, c in zip(run.tasks, task_configs, strict=True) if run.kinds[t.name] in LOGLIKELIHOOD]
        out: dict[str, Any] = {}
        with unobserved(progress):
            if generated:
                out = _harness(target, generated, _model(target, run.concurrency, run.timeout), True, run.limit)
            if scored:
                model = _scoring_model(target, run.concurrency, run.timeout)
                out = _merged(out, _harness(target, scored, model, False, run.limit))
    task_facts, cases, samples = [], [], []
    for task, config in zip(run.tasks, task_configs, strict=True):
        facts, task_cases, task_samples = _task_result(task, config["task"], run.files[task.name], out)
        if run.kinds[task.name] != "generate_until":
            facts["output_type"] = run.kinds[task.name]
            facts["chat_template"] = False
            facts["fewshot_as_multiturn"] = False
        if run.limit is not None:
            facts["limit"] = run.limit
        task_facts.append(facts)
        cases += task_cases
        samples += task_samples
    if record.status == "external":
        runs.save(record)
    version = harness_version()
    eval_id = "e" + new_run_id()
    digest = _suite_digest(version, task_facts)
    passed = sum(1 for c in cases if c["passed"])
    smoke = f" smoke --limit {run.limit}" if run.limit is not None else ""
    result: dict[str, Any] = {
        "schema_version": RESULT_SCHEMA,
        "eval_id": eval_id,
        "run_id": record.run_id,
        "created_at": now(),
        "target": target_facts(record, target),
        "suite": {
            "name": run.suite,
            "version": ",".join(f"{t['name']}-{t['set_version']}" for t in task_facts),
            "sha256": digest,
            "full_version": f"{HARNESS} {version}: "
            + ", ".join(f"{t['task']} v{t['version']}" for t in task_facts)
            + f" +{digest[:12]}{smoke}",
        },
        "harness": {"name": HARNESS, "version": version},
        "tasks": task_facts,
        "settings": {"concurrency": run.concurrency, "labctl_version": __version__, "timeout_s": run.timeout},
        "status": "complete",
        "score": passed / len(cases) if cases else None,
        "passed": passed,
        "total": len(cases),
        "score_ci95": wilson_interval(passed, len(cases)),
        "interval_method": PASS_RATE_METHOD,
        "cases": cases,
        "samples_file": f"{eval_id}.samples.jsonl",
    }
    if run.limit is not None:
        result["settings"]["limit"] = run.limit
        result["smoke"] = True
    if shared_with is not None:
        result["shared_engine"] = {"allowed": True, "holder": shared_with}
    folder = runs.dir(record.run_id) / "eval"
    write_run_file(folder / f"{eval_id}.samples.jsonl", "".join(json.dumps(s) + "\n" for s in samples))
    path = folder / f"{eval_id}.json"
    write_run_file(path, json.dumps(result, indent=1) + "\n")
    return result, path


def _harness(
    target: Target, task_configs: list[dict[str, Any]], model: Any, chat: bool, limit: int | None
) -> dict[str, Any]:
    """One lm-evaluation-harness evaluation of these tasks; its failure, of any type, is one line."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    try:
        out = lm_eval.simple_evaluate(
            model=model,
            # labctl's task sets are given whole: indexing the harness's thousands of own tasks takes seconds
            task_manager=TaskManager(include_defaults=False),
            tasks=task_configs,
            fewshot_random_seed=FEWSHOT_SEED,
            fewshot_as_multiturn=FEWSHOT_AS_MULTITURN and chat,
            apply_chat_template=chat,
            log_samples=True,
            bootstrap_iters=1000,
            limit=limit,
        )
    except Exception as exc:  # a third-party program's failure, of any type, is one line here
        said = str(exc)[:300].replace(target.api_key, "<key>") if target.api_key else str(exc)[:300]
        raise LabctlError(
            f"lm-evaluation-harness stopped ({type(exc).__name__}: {said}): the endpoint at {target.base_url} "
            "failed to answer, or a task's data or config is wrong. Nothing was recorded."
        ) from None
    if out is None:
        raise LabctlError("lm-evaluation-harness returned no results.")
    return dict(out)


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two of the harness's outputs (generated and scored tasks) as one, task by task."""
    if not a:
        return b
    keys = ("results", "configs", "versions", "n-shot", "n-samples", "samples")
    return {**a, **{k: {**(a.get(k) or {}), **(b.get(k) or {})} for k in keys}}


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
    optional = ("output_type", "chat_template", "limit")  # absent from earlier results, whose digests stay theirs
    hashed = {
        "harness": version,
        "tasks": [{k: t[k] for k in keep} | {k: t[k] for k in optional if k in t} for t in tasks],
    }
    return hashlib.sha256(json.dumps(hashed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _task_result(
    task: TaskSet, harness_name: str, files: dict[str, list[Path]], out: dict[str, Any]
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
        output = _chosen(sample.get("filtered_resps")) or _first(sample.get("resps"))
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


def _chosen(value: Any) -> str:
    """A multiple-choice answer: the choice whose continuation scored highest (its log-likelihood), else ''."""
    pairs = value if isinstance(value, list) else []
    scores = [p[0] for p in pairs if isinstance(p, list | tuple) and p and isinstance(p[0], int | float)]
    if not pairs or len(scores) != len(pairs):
        return ""
    best = max(range(len(scores)), key=scores.__getitem__)
    return f"choice {best} (log-likelihood {scores[best]:.4f})"


def _first(value: Any) -> str:
    while isinstance(value, list | tuple) and value:
        value = value[0]
    return "" if value is None else str(value)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SAMPLE_CHARS else text[:MAX_SAMPLE_CHARS] + " […cut]"
