"""How labctl hands its task sets to lm-evaluation-harness: offline, quiet, with the same few-shot choices
for an evaluation and for the harness engine's answer map."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from labctl.catalog.lab import Lab
from labctl.errors import BadInput
from labctl.quality.task_yaml import sandbox_templates
from labctl.quality.tasks import TaskSet, harness_config, load_task, task_names
from labctl.run.records.store import Runs

FEWSHOT_SEED = 1234  # the harness's default, given so the answer map samples the same few-shot examples
FEWSHOT_AS_MULTITURN = True  # each example a user and an assistant turn: how a chat model is asked
# Output types scored by log-likelihood through completions (no chat template), not generated through chat.
LOGLIKELIHOOD = ("multiple_choice", "loglikelihood", "loglikelihood_rolling")


def load_tasks(lab: Lab, suite: str) -> list[TaskSet]:
    """The task sets `--suite lm-eval:NAME[@VERSION],…` names; a version asked for must be the lab's."""
    tasks = []
    for name, version in task_names(suite):
        task = load_task(lab, name)
        if version is not None and version != task.version:
            raise BadInput(
                f"--suite asks for task set {name} version {version}, but the lab's is {task.version} "
                f"(suites/lm-eval/{name}/source.yaml)."
            )
        tasks.append(task)
    return tasks


@contextmanager
def quiet() -> Iterator[None]:
    """The harness logs a failed request's repr, headers and all (the key among them): its loggers, and asyncio's
    (a never-retrieved task's exception), say nothing while it runs; labctl reports a failure itself."""
    loggers = [logging.getLogger(name) for name in ("lm_eval", "asyncio")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    yield
    gc.collect()  # tasks whose exception nobody retrieved are reported when collected: collect them now
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)
    # after a failure the harness's tasks may outlive this call (reported at exit): asyncio stays silent then


@contextmanager
def unobserved(progress: bool) -> Iterator[None]:
    """While the harness evaluates: its progress bars only when someone watches (it passes `disable=False` to
    some of them, which TQDM_DISABLE does not override), and no `git describe` in the user's folder (the
    harness records the current folder's commit; labctl records its own versions)."""
    import contextlib
    import io

    from lm_eval import evaluator
    from lm_eval.loggers import utils as logger_utils

    saved = evaluator.get_git_commit_hash, logger_utils.get_git_commit_hash
    evaluator.get_git_commit_hash = logger_utils.get_git_commit_hash = lambda: None
    try:
        with contextlib.redirect_stderr(io.StringIO()) if not progress else contextlib.nullcontext():
            yield
    finally:
        evaluator.get_git_commit_hash, logger_utils.get_git_commit_hash = saved


@contextmanager
def offline(progress: bool = True) -> Iterator[None]:
    """The harness and `datasets` read files only: no Hub, no download (set before they are imported); their
    progress bars only when someone watches."""
    names = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM", "TQDM_DISABLE")
    before = {name: os.environ.get(name) for name in names}
    os.environ.update({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    if not progress:
        os.environ["TQDM_DISABLE"] = "1"
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def configs(runs: Runs, tasks: list[TaskSet], files: dict[str, dict[str, list[Path]]]) -> list[dict[str, Any]]:
    sandbox_templates()  # before the harness renders any of these tasks' templates
    configs = []
    for task in tasks:
        config = harness_config(task, files[task.name])
        # the harness's own prepared copy of the data, kept in labctl's home
        config["dataset_kwargs"]["cache_dir"] = str(runs.home / "cache" / "datasets")
        configs.append(config)
    return configs
