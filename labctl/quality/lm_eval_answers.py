"""The harness engine's --answers map for lm-eval task sets: each prompt exactly as lm-evaluation-harness will
send it (few-shot turns, the chat messages' last user turn), mapped to the document's reference field."""

from __future__ import annotations

import json

from labctl.catalog.lab import Lab
from labctl.compose.options import check_cache_dir
from labctl.errors import BadInput
from labctl.quality.lm_eval_env import FEWSHOT_AS_MULTITURN, FEWSHOT_SEED, configs, load_tasks, offline
from labctl.quality.tasks import data_files
from labctl.run.records.store import Runs


def answer_map(runs: Runs, lab: Lab, suite: str, cache_dir: str | None = None) -> dict[str, str]:
    """The harness engine's --answers map for these task sets: each prompt exactly as the harness will send it
    (few-shot examples, chat messages), mapped to the document's reference field (source.yaml `reference`)."""
    tasks = load_tasks(lab, suite)
    cache = check_cache_dir(cache_dir)
    files = {task.name: data_files(task, cache) for task in tasks}
    without = [t.name for t in tasks if not t.reference]
    if without:
        raise BadInput(f"task set {without[0]} names no reference field in its source.yaml: no answer map.")
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
                if task_obj.get_config("num_fewshot") is None:
                    task_obj.set_config(key="num_fewshot", value=0)
                task_obj.set_fewshot_seed(seed=FEWSHOT_SEED)
                task_obj.build_all_requests(
                    limit=None,
                    rank=0,
                    world_size=1,
                    apply_chat_template=True,
                    fewshot_as_multiturn=FEWSHOT_AS_MULTITURN,
                    chat_template=lm.apply_chat_template,
                )
        except Exception as exc:  # a task's config or template, of any type of failure, is one line here
            names = ", ".join(t.name for t in tasks)
            raise BadInput(
                f"task set {names}: lm-evaluation-harness could not build its prompts "
                f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); fix the task.yaml."
            ) from None
        for name, task_obj in loaded["tasks"].items():
            field = str(by_task[name].reference)
            for instance in task_obj.instances:
                context = getattr(instance.args[0], "prompt", instance.args[0])  # JsonChatStr: the messages' JSON
                messages = json.loads(context) if isinstance(context, str) else context
                prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
                answers[str(prompt).strip()] = str(instance.doc[field])
    return answers
