"""The harness engine's --answers map for lm-eval task sets: each prompt exactly as lm-evaluation-harness will
send it (few-shot turns, the chat messages' last user turn), mapped to the document's reference field (or, with
none named, the task's own target); for a log-likelihood task, each context mapped to its right continuation,
which the harness engine then scores as the likeliest."""

from __future__ import annotations

import json
from typing import Any

from labctl.catalog.lab import Lab
from labctl.compose.options import check_cache_dir
from labctl.errors import BadInput
from labctl.quality.lm_eval_env import FEWSHOT_AS_MULTITURN, FEWSHOT_SEED, LOGLIKELIHOOD, configs, load_tasks, offline
from labctl.quality.tasks import data_files
from labctl.run.records.store import Runs


def answer_map(runs: Runs, lab: Lab, suite: str, cache_dir: str | None = None) -> dict[str, str]:
    """The harness engine's --answers map for these task sets: each prompt exactly as the harness will send it
    (few-shot examples, chat messages), mapped to the document's reference field (source.yaml `reference`)."""
    tasks = load_tasks(lab, suite)
    cache = check_cache_dir(cache_dir)
    files = {task.name: data_files(task, cache) for task in tasks}
    by_task = {config["task"]: task for config, task in zip(configs(runs, tasks, files), tasks, strict=True)}
    answers: dict[str, str] = {}
    with offline(progress=False):
        from lm_eval.models.openai_completions import LocalChatCompletion
        from lm_eval.tasks import TaskManager

        lm = LocalChatCompletion(model="answer-map", base_url="http://127.0.0.1:9/v1/chat/completions")
        task_configs = configs(runs, tasks, files)
        try:
            loaded = TaskManager(include_defaults=False).load(task_configs)
            for task_obj in loaded["tasks"].values():
                scored = task_obj.get_config("output_type") in LOGLIKELIHOOD
                if task_obj.get_config("num_fewshot") is None:
                    task_obj.set_config(key="num_fewshot", value=0)
                task_obj.set_fewshot_seed(seed=FEWSHOT_SEED)
                task_obj.build_all_requests(
                    limit=None,
                    rank=0,
                    world_size=1,
                    apply_chat_template=not scored,
                    fewshot_as_multiturn=FEWSHOT_AS_MULTITURN and not scored,
                    chat_template=None if scored else lm.apply_chat_template,
                )
        except Exception as exc:  # a task's config or template, of any type of failure, is one line here
            names = ", ".join(t.name for t in tasks)
            raise BadInput(
                f"task set {names}: lm-evaluation-harness could not build its prompts "
                f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); fix the task.yaml."
            ) from None
        for name, task_obj in loaded["tasks"].items():
            answers.update(_task_answers(task_obj, by_task[name].reference))
    return answers


def _task_answers(task_obj: Any, field: str | None) -> dict[str, str]:
    answers: dict[str, str] = {}
    for instance in task_obj.instances:
        if instance.request_type in LOGLIKELIHOOD:  # (context, continuation), one instance per choice
            context, continuation = instance.args[0], instance.args[1]
            if instance.idx == _gold(task_obj, instance.doc):
                answers[str(context).strip()] = str(continuation)
            continue
        context = getattr(instance.args[0], "prompt", instance.args[0])  # JsonChatStr: the messages' JSON
        messages = json.loads(context) if isinstance(context, str) else context
        prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        target = instance.doc[field] if field else task_obj.doc_to_target(instance.doc)
        answers[str(prompt).strip()] = str(target)
    return answers


def _gold(task_obj: Any, doc: dict[str, Any]) -> int:
    """The right choice's index (a task's target is an index or the choice's text)."""
    target = task_obj.doc_to_target(doc)
    if isinstance(target, int):
        return target
    choices = task_obj.doc_to_choice(doc)
    return choices.index(target) if target in choices else -1
