"""study: the engine comparison as one unattended, resumable job — plan, run, status, report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from labctl.cli.context import out, skip, state, table, warn

if TYPE_CHECKING:
    from labctl.study.plan import StudyPlan
    from labctl.study.spec import Study

FILE_HELP = "The study file (a path, or NAME for the lab's studies/NAME.yaml)."


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        no_args_is_help=True,
        help="Studies: profiles x overrides x hosts, measured unattended and resumed by fingerprint.\n\n"
        "Example: labctl study plan studies/harness-demo.yaml",
    )
    group.command("plan")(plan)
    group.command("run")(run)
    group.command("status")(status)
    group.command("report")(report)
    app.add_typer(group, name="study")


def _load(given: str) -> Study:
    from labctl.catalog.lab import check_name
    from labctl.errors import BadInput
    from labctl.study.spec import load_study

    path = Path(given)
    if not path.is_file() and "/" not in given and not given.endswith((".yaml", ".yml")):
        path = state.lab().root / "studies" / f"{check_name(given, 'study')}.yaml"
    if not path.is_file():
        raise BadInput(f"no study file {given!r} (looked for {path}).")
    return load_study(path)


PORT_HELP = "Every cell's port (host i of the study's list uses PORT + i); default: each profile entry's port."


def _plan(study: Study, port: int | None = None) -> StudyPlan:
    from labctl.study.plan import plan_study
    from labctl.study.state import check_untouched

    check_untouched(state.runs().home, study)
    if port is not None and not 0 < port < 65000:
        from labctl.errors import BadInput

        raise BadInput(f"--port {port}: give a TCP port from 1 to 64999.")
    return plan_study(state.lab(), study, state.runs(), state.host_option, port)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _print_plan(chosen: StudyPlan) -> None:
    from labctl.study.state import StudyState, study_folder

    study = chosen.study
    stored = StudyState(study_folder(state.runs().home, study.name))
    out(
        f"study {study.name} ({study.path}): {len(chosen.cells)} cells x {study.repeats} repeat(s), "
        f"environment {study.environment}, workloads {', '.join(chosen.workloads)}, "
        f"suites {', '.join(chosen.suites) or 'none'}"
    )
    rows = []
    for cp in chosen.cells:
        resume = []
        for repeat, fingerprint in enumerate(cp.fingerprints, start=1):
            previous = stored.load_cell(cp.cell.key, repeat)
            if previous is None:
                resume.append(f"r{repeat} new")
            elif previous.get("fingerprint_digest") == fingerprint.digest and previous.get("state") in (
                "done",
                "failed",
            ):
                resume.append(f"r{repeat} {previous['state']}, reused")
            elif previous.get("fingerprint_digest") == fingerprint.digest:
                resume.append(f"r{repeat} {previous.get('state')}, redone")
            else:
                resume.append(f"r{repeat} redo: {', '.join(fingerprint.changed(previous.get('fingerprint')))} changed")
        fit = "-" if cp.fit is None else ("fits" if cp.fit.fits else "DOES NOT FIT") + f" {cp.fit_target}"
        levels = "; ".join(
            f"{w} {','.join(str(c) + ('*' if c in cp.kv_bound.get(w, []) else '') for c in ls)}"
            for w, ls in cp.levels.items()
        )
        cap = "?" if cp.batch_cap.value is None else str(cp.batch_cap.value)
        rows.append(
            [
                cp.cell.key,
                cp.cell.placement.kind + " " + cp.cell.host,
                str(cp.cell.profile.port),
                cp.accelerator,
                fit,
                levels,
                cap + (" (over)" if cp.over_cap else ""),
                ("cached " if cp.image_cached else "to pull ")
                + (cp.image[:19] if cp.image.startswith("sha256:") else "(unpinned)"),
                "-" if cp.model_gib is None else f"{cp.model_gib:g} GiB" + (" cached" if cp.model_cached else ""),
                _clock(cp.estimate_s),
                "; ".join(resume),
            ]
        )
    out(
        table(
            rows, ["CELL", "PLACEMENT", "PORT", "ACCEL", "FIT", "LEVELS", "CAP", "IMAGE", "MODEL", "ESTIMATE", "RESUME"]
        )
    )
    if any(ls for cp in chosen.cells for ls in cp.kv_bound.values()):
        out("levels marked * are KV-bound: the KV cache cannot hold every stream at once (they run; see findings)")
    models: dict[str, tuple[float | None, bool]] = {}
    images: dict[tuple[str, str], bool] = {}
    for cp in chosen.cells:
        model = cp.cell.profile.model
        models[f"{model.id}@{model.revision}"] = (cp.model_gib, cp.model_cached)
        images[(cp.cell.host, cp.image)] = cp.image_cached
    to_fetch = sum(g or 0 for g, cached in models.values() if not cached)
    out(
        f"disk: {len(models)} model(s), {to_fetch:g} GiB to fetch ({sum(1 for _, c in models.values() if c)} cached); "
        f"{len(images)} image(s) on their hosts, {sum(1 for c in images.values() if not c)} to pull"
    )
    known = [cp.estimate_s for cp in chosen.cells]
    if all(k is not None for k in known):
        per_host: dict[str, float] = {}
        for cp in chosen.cells:
            per_host[cp.cell.host] = per_host.get(cp.cell.host, 0.0) + (cp.estimate_s or 0.0) * study.repeats
        out(f"estimate: {_clock(max(per_host.values()))} (hosts in parallel; from past records on each host)")
    else:
        out("estimate: unknown for cells with no past record of the same setup on their host (ESTIMATE column)")
    for cp in chosen.cells:
        out(f"batch cap {cp.cell.key}: {cp.batch_cap.text}")
    if study.batch_caps_note:
        out(f"batch caps kept: {study.batch_caps_note}")
    for budget in chosen.prompts:
        out(budget.line())
    for finding in chosen.findings:
        warn(f"finding{' (run refuses)' if finding in chosen.refusals else ''}: {finding}")


def plan(
    file: Annotated[str, typer.Argument(help=FILE_HELP)],
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as one JSON object.")] = False,
    port: Annotated[int | None, typer.Option(help=PORT_HELP)] = None,
) -> None:
    """Check a study and expand it into cells before any GPU time: same rules, fit, levels, disk, estimate.

    A study whose cells would not compare under the same rules (model, revision, quantization, context,
    thinking) exits 2 naming the field and the cells. What `study run` would refuse (a host that does not
    answer, a gpu study on simulated hosts, a workload not fetched) is printed as a finding, and the plan exits
    2 after printing it. Nothing is written or started.

    Example: labctl study plan studies/harness-demo.yaml
    """
    from labctl.study.plan import describe

    chosen = _plan(_load(file), port)
    if as_json:
        print(json.dumps(describe(chosen)))
    else:
        _print_plan(chosen)
    if chosen.refusals:  # `study run` would refuse it as it stands: a script reading the plan must see that
        raise typer.Exit(2)


def run(
    file: Annotated[str, typer.Argument(help=FILE_HELP)],
    redo_failed: Annotated[
        bool, typer.Option(help="Measure failed cells again (done cells are still reused).")
    ] = False,
    port: Annotated[int | None, typer.Option(help=PORT_HELP)] = None,
) -> None:
    """Run every cell: up, a canary at the lowest level, the ladder, the suites, down; resumable.

    Repeats are interleaved (A1 B1 C1 A2 ...); cells on different hosts run in parallel. A failed cell is
    classified and recorded with its engine's logs, and the others go on. Run it again after Ctrl-C, SIGTERM
    or a reboot: a cell is skipped only when its fingerprint (image digest, rendered argv, model revision,
    workloads, suites, client version, host GPUs) matches a finished result. The report is rewritten after
    every finished cell.

    Example: labctl study run studies/harness-demo.yaml
    """
    from labctl.study.report import report_writer
    from labctl.study.schedule import run_study
    from labctl.study.state import open_state

    study = _load(file)
    chosen = _plan(study, port)
    _print_plan(chosen)
    if chosen.refusals:
        from labctl.errors import BadInput

        raise BadInput(f"{study.path}: the study cannot run here: {chosen.refusals[0]}")
    runs = state.runs()
    home_state = open_state(runs.home, study)
    out(f"report: {home_state.report_dir / 'index.html'} (rewritten after every finished cell)")
    outcome = run_study(state.lab(), runs, chosen, home_state, warn, report_writer(runs, home_state, warn), redo_failed)
    failed = [c for c in home_state.all_cells() if c.get("state") == "failed"]
    out(f"study {study.name}: {outcome.measured} measured, {outcome.reused} reused, {len(failed)} failed")
    out(f"report: {home_state.report_dir / 'index.html'}")


def status(
    name: Annotated[str, typer.Argument(help="The study's name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Each cell's state, the running cell's level, and an ETA for the whole study.

    Example: labctl study status harness-demo --json
    """
    from labctl.study.progress import study_status
    from labctl.study.state import find_state

    found = find_state(state.runs().home, name)
    from labctl.errors import BadInput
    from labctl.study.cells import count_cells

    planned = None
    file = found.about().get("file")
    if file and Path(str(file)).is_file():
        try:
            planned = count_cells(_load(str(file)))
        except BadInput:  # the file changed into something unreadable: the state alone
            planned = None
    result = study_status(found, planned, skip)
    if as_json:
        print(json.dumps(result))
        return
    out(
        f"study {result['study']} ({result['file']}): {result['finished']}/{result['total']} finished, ETA {_clock(result['eta_s'])}"
    )
    rows = [
        [
            str(c["cell"]),
            str(c["repeat"]),
            str(c["host"]),
            str(c["state"]),
            str(c["level"] or "-"),
            str(c["run_id"] or "-"),
            str(c["failure"] or "-"),
        ]
        for c in result["cells"]
    ]
    out(table(rows, ["CELL", "REPEAT", "HOST", "STATE", "LEVEL", "RUN", "FAILURE"]))
    if result["report"]:
        out(f"report: {result['report']}")


def report(
    name: Annotated[str, typer.Argument(help="The study's name.")],
    output: Annotated[
        str | None, typer.Option("-o", "--output", help="Another folder to write (default: the study's own report).")
    ] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            help="Replace an existing folder that is not a labctl report (marked by .labctl-report), or one "
            "holding files labctl did not write."
        ),
    ] = False,
) -> None:
    """Write the study's report again: cells, failures, censored levels, GPU-hours, the comparisons and plots.

    Example: labctl study report harness-demo -o harness-demo-report
    """
    from labctl.host.files.outputs import check_report_target, output_path
    from labctl.study.report import write_study_report
    from labctl.study.state import find_state

    found = find_state(state.runs().home, name)
    target = output_path(output) if output else None
    if target is not None:
        check_report_target(target, overwrite)
    folder = write_study_report(state.runs(), found, target, overwrite)
    out(str(folder / "index.html"))
