"""fetch: a profile's model into the cache its engine mounts, before anything starts."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Annotated

import typer

from labctl.cli.context import (
    HOST_HELP,
    complete_engine,
    complete_host,
    complete_profile,
    complete_workload,
    out,
    state,
    warn,
)

if TYPE_CHECKING:
    from labctl.run.models.fetch import Fetched

hub_app = typer.Typer(
    help="The lab's loopback Hub: its tiny models as Hub repositories on 127.0.0.1.\n\nExample: labctl hub serve",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.command("fetch")(fetch)
    app.add_typer(hub_app, name="hub")


@hub_app.command("serve")
def hub_serve(
    port: Annotated[int, typer.Option(help="The port on 127.0.0.1 (0: any free port).", min=0, max=65535)] = 0,
) -> None:
    """Serve the lab's tiny models (build/tiny-models, or $LABCTL_TINY_MODELS; made when missing) as Hub repositories labctl/NAME on 127.0.0.1 until Ctrl-C. `labctl fetch` and `up` of a profile whose model says `hub: loopback` need no such server: they serve the models themselves while they fetch.

    Example: labctl hub serve --port 18090
    """
    from labctl.errors import BadInput
    from labctl.host.hub.loopback import LoopbackHub
    from labctl.host.hub.tiny_models import ensure_models, models_folder

    root = state.lab().root
    folder = models_folder(root)
    repos = ensure_models(root, folder, warn)
    try:
        hub = LoopbackHub(repos, port=port)
    except OSError as exc:
        raise BadInput(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}. Choose another --port.") from None
    out(f"serving {folder} at {hub.endpoint} (Ctrl-C stops it)")
    for repo_id, repo in sorted(repos.items()):
        out(f"  {repo_id}  commit {repo.commit}  ({len(repo.files)} files)")
    hub.serve_until_stopped()


def fetch(
    engine: Annotated[str | None, typer.Argument(autocompletion=complete_engine, help="The engine, e.g. vllm.")] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile", "-p", autocompletion=complete_profile, help="The launch profile whose model to fetch."
        ),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            help="Instead: an lm-eval task set whose dataset to fetch at its pinned revision (suites/lm-eval/NAME); a task, group or tag lm-evaluation-harness ships and the lab lacks is pinned into the lab first (its dataset's commit now)."
        ),
    ] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            autocompletion=complete_workload,
            help="Instead: a workload whose Hub dataset to fetch (workloads/NAME.yaml: dataset.repo).",
        ),
    ] = None,
    cache_dir: Annotated[
        str | None, typer.Option(envvar="LABCTL_CACHE_DIR", help="Host model cache (default: ~/.cache/huggingface).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="End with what was fetched as one JSON object.")] = False,
    host: Annotated[str | None, typer.Option("--host", autocompletion=complete_host, help=HOST_HELP)] = None,
) -> None:
    """Download a profile's model at its pinned revision into the cache its engine mounts (resumable; HF_TOKEN from the environment); or, with --task, a quality task set's dataset, read offline by `labctl eval run --suite lm-eval:NAME`; or, with --workload, a workload's Hub dataset file, read offline by `labctl bench`.

    Example: labctl fetch sglang --profile qwen3-32b
    """
    from labctl.errors import BadInput

    if task is not None or workload is not None:
        flag = "--task" if task is not None else "--workload"
        if engine is not None or profile is not None or host is not None or (task and workload):
            raise BadInput(f"{flag} fetches a dataset to this machine: give it alone (no ENGINE, --profile or --host).")
        if task is not None:
            _fetch_task(task, cache_dir, as_json)
        else:
            _fetch_workload(str(workload), cache_dir, as_json)
        return
    if engine is None or profile is None:
        raise BadInput("give ENGINE and --profile NAME (a model), or --task NAME (a dataset).")
    from labctl.catalog.profiles import load_profile
    from labctl.cli.runs import _progress
    from labctl.run.models.fetch import fetch_model, snapshot_acquisition
    from labctl.run.records.acquired import Ledger
    from labctl.run.records.prep_view import part_text

    state.choose_host(host)
    lab = state.lab()
    fetched = fetch_model(
        load_profile(lab, engine, profile, allow_unsupported=True),
        cache_dir,
        say=warn,
        live=None if as_json else _progress(),
        host=state.host(),
    )
    ledger = Ledger(state.runs().home)
    try:
        ledger.append(snapshot_acquisition(fetched, state.host(), None))
    except OSError as exc:
        warn(f"warning: could not note the fetch in {ledger.path} (labctl gc will not offer it): {exc}")
    if as_json:
        print(json.dumps({**dataclasses.asdict(fetched), "prep": fetched.part().to_json()}))
        return
    where = f" on {state.host().name}" if state.host().is_remote else ""
    out(f"model {fetched.repo_id}@{fetched.revision}: commit {fetched.commit} in {fetched.cache_dir}{where}")
    out(f"  model_fetch  {part_text(fetched.part())}")


def _fetch_task(name: str, cache_dir: str | None, as_json: bool) -> None:
    from labctl.cli.runs import _progress
    from labctl.errors import BadInput
    from labctl.quality.tasks import load_task
    from labctl.run.models.datasets import fetch_dataset

    lab = state.lab()
    name = name.removeprefix("lm-eval:")
    if not (lab.root / "suites" / "lm-eval" / name / "source.yaml").is_file():
        _pin_shipped_task(name, cache_dir, as_json)
        return
    task = load_task(lab, name)
    if task.repo is None or task.revision is None:
        raise BadInput(f"task set {task.name} reads files in the lab ({task.folder}): there is nothing to fetch.")
    where = f"dataset.repo and dataset.revision in suites/lm-eval/{task.name}/source.yaml"
    wanted = tuple(sorted({path for split in task.files for path in task.paths(split)}))  # what the task reads
    live = None if as_json else _progress()
    fetched = fetch_dataset(task.repo, task.revision, cache_dir, where, say=warn, live=live, files=wanted)
    _note_dataset_fetch(fetched)
    if as_json:
        print(json.dumps(dataclasses.asdict(fetched)))
        return
    out(f"dataset {fetched.repo_id}@{fetched.commit} for task set {task.name} in {fetched.cache_dir}")


def _pin_shipped_task(name: str, cache_dir: str | None, as_json: bool) -> None:
    """A task the harness ships, not yet in the lab: pinned into it (each task of a group), its data fetched."""
    from labctl.cli.runs import _progress
    from labctl.compose.options import check_cache_dir
    from labctl.quality.pin_task import pin_shipped

    pinned = pin_shipped(state.lab(), name, check_cache_dir(cache_dir), say=warn, live=None if as_json else _progress())
    for task in pinned:
        _note_dataset_fetch(task.fetched)
    if as_json:
        print(json.dumps([{"task": t.name, **dataclasses.asdict(t.fetched)} for t in pinned]))
        return
    for task in pinned:
        out(
            f"task set {task.name}: pinned {task.repo}@{task.commit} ({task.files} data files) in "
            f"suites/lm-eval/{task.name}/source.yaml; data in {task.fetched.cache_dir}"
        )
    if pinned:
        out(f"evaluate with: labctl eval run RUN --suite lm-eval:{','.join(t.name for t in pinned[:16])}")


def _note_dataset_fetch(fetched: Fetched) -> None:
    """The fetch in the home's ledger, so that `labctl gc` offers it; a ledger that cannot be written is said."""
    from labctl.run.models.datasets import dataset_acquisition
    from labctl.run.records.acquired import Ledger

    ledger = Ledger(state.runs().home)
    try:
        ledger.append(dataset_acquisition(fetched))
    except OSError as exc:
        warn(f"warning: could not note the fetch in {ledger.path} (labctl gc will not offer it): {exc}")


def _fetch_workload(name: str, cache_dir: str | None, as_json: bool) -> None:
    from labctl.bench.hub_dataset import hub_dataset_of
    from labctl.bench.workloads import load_workload
    from labctl.cli.runs import _progress
    from labctl.errors import BadInput
    from labctl.run.models.datasets import fetch_dataset

    workload = load_workload(state.lab(), name)
    hub = hub_dataset_of(workload.name, workload.hub_dataset)
    if hub is None:
        raise BadInput(
            f"workload {name}: its dataset is not a Hub dataset (no dataset.repo): there is nothing to fetch."
        )
    where = f"dataset.repo, dataset.revision and dataset.file in workloads/{name}.yaml"
    live = None if as_json else _progress()
    fetched = fetch_dataset(hub.repo, hub.revision, cache_dir, where, say=warn, live=live, files=(hub.file,))
    _note_dataset_fetch(fetched)
    if as_json:
        print(json.dumps({**dataclasses.asdict(fetched), "file": hub.file}))
        return
    out(f"dataset {fetched.repo_id}@{fetched.revision}: commit {fetched.commit}, {hub.file}, for workload {name}")
    out(f"  in {fetched.cache_dir}; read offline by `labctl bench --workload {name}`")
