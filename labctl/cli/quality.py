"""eval and suites: quality measured beside performance, under the same run id."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from labctl.cli.context import (
    HOST_HELP,
    SHARED_HELP,
    WAIT_HELP,
    Thinking,
    complete_host,
    eval_id_arg,
    listing,
    out,
    result_ids_arg,
    run_argument,
    skip,
    state,
    table,
    warn,
)
from labctl.cli.groups import GroupWithDefault


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        cls=GroupWithDefault,
        no_args_is_help=True,
        help="Quality suites against a run: run, list, diff.\n\nExample: labctl eval run 20261203-015815-a1b2c3 --suite coding",
    )
    group.command("run")(evaluate)
    group.command("list")(list_evaluations)
    group.command("diff")(diff_evaluations)
    app.add_typer(group, name="eval")
    app.command("suites")(suites)
    app.command("compare")(compare)
    app.command("report")(report)


def suites(
    name: Annotated[str | None, typer.Argument(help="One suite (default: list them all).")] = None,
    answer_map: Annotated[
        bool, typer.Option(help="Print the suite's reference answers as the harness engine's --answers JSON.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List quality suites with their versions, or print one suite's answer map for the harness engine.

    Example: labctl suites coding --answer-map > answers.json
    """
    from labctl.errors import BadInput
    from labctl.quality.suites import list_suites, load_suite

    lab = state.lab()
    if name and name.startswith("lm-eval:"):
        _lm_eval_sets(name, answer_map, as_json)
        return
    if name:
        suite = load_suite(lab, name)
        if answer_map:
            print(json.dumps(suite.answer_map(), indent=1))
            return
        if not as_json:
            out(f"{suite.name} {suite.full_version}: {suite.description}")
        listing(
            [[c.id, c.check["kind"], c.prompt if as_json else c.prompt[:70]] for c in suite.cases],
            ["CASE", "CHECK", "PROMPT"],
            as_json,
        )
        return
    rows = []
    for suite_name in list_suites(lab):
        try:
            suite = load_suite(lab, suite_name)
        except BadInput as exc:
            skip(f"skipped suite {suite_name}: {exc}")
            continue
        rows.append([suite.name, suite.full_version, str(len(suite.cases)), suite.description])
    from labctl.quality.tasks import PREFIX, list_tasks, load_task

    for task_name in list_tasks(lab):
        try:
            task = load_task(lab, task_name)
        except BadInput as exc:
            skip(f"skipped task set {task_name}: {exc}")
            continue
        rows.append([PREFIX + task.name, task.version, "-", f"{task.description} [{task.source}]"])
    listing(rows, ["SUITE", "VERSION", "CASES", "DESCRIPTION"], as_json)


def _lm_eval_sets(name: str, answer_map: bool, as_json: bool) -> None:
    from labctl.quality.lm_eval_answers import answer_map as harness_answers
    from labctl.quality.lm_eval_env import load_tasks

    if answer_map:
        print(json.dumps(harness_answers(state.runs(), state.lab(), name), indent=1))
        return
    rows = [
        [t.name, t.version, t.source, ", ".join(f"{k}={v}" for k, v in sorted(t.files.items())), t.description]
        for t in load_tasks(state.lab(), name)
    ]
    listing(rows, ["TASK SET", "VERSION", "DATASET", "FILES", "DESCRIPTION"], as_json)


def evaluate(
    run_id: Annotated[
        str | None,
        run_argument("A running labctl run (or use --base-url and --model)."),
    ] = None,
    suite: Annotated[
        str | None,
        typer.Option(
            help="The suite (suites/NAME/suite.yaml), or lm-eval:TASK[,TASK…] for lm-evaluation-harness task sets (suites/lm-eval/TASK/)."
        ),
    ] = None,
    base_url: Annotated[str | None, typer.Option(help="Any OpenAI-compatible base URL.")] = None,
    model: Annotated[str | None, typer.Option(help="The served model name (with --base-url).")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="Name of the variable holding the API key.")] = None,
    environment_label: Annotated[str, typer.Option(help="Label for an endpoint labctl did not start.")] = "external",
    thinking: Annotated[
        Thinking | None,
        typer.Option(help="An endpoint labctl did not start: off asks every chat request not to think."),
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Cases asked at once.")] = 8,
    timeout: Annotated[float, typer.Option(help="Seconds one answer may take.")] = 300.0,
    limit: Annotated[
        int | None,
        typer.Option(
            help="lm-eval task sets: ask each task's first N documents only. A smoke run, recorded so: it is never "
            "compared with a full run."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole result as JSON.")] = False,
    host: Annotated[str | None, typer.Option("--host", autocompletion=complete_host, help=HOST_HELP)] = None,
    allow_shared_engine: Annotated[bool, typer.Option(help=SHARED_HELP)] = False,
    wait_for_engine: Annotated[float, typer.Option(help=WAIT_HELP)] = 0.0,
    max_error_rate: Annotated[
        float,
        typer.Option(
            help="The share of cases that may get no answer (HTTP, transport or timeout errors; default 0.1 = "
            "10%); above it the evaluation is partial, and the command exits 1."
        ),
    ] = 0.1,
) -> None:
    """Run a quality suite against a run; verdicts are stored beside its record.

    Example: labctl eval run 20261203-015815-a1b2c3 --suite coding
    """
    from labctl.bench.bench_request import BenchRequest
    from labctl.errors import BadInput
    from labctl.quality.evaluate import run_eval
    from labctl.quality.suites import load_suite

    state.choose_host(host)
    runs = state.runs()
    if not suite:
        raise BadInput("--suite NAME is required (see `labctl suites`).")
    request = BenchRequest(
        workload=None,
        run_id=run_id,
        base_url=base_url,
        model=model,
        api_key_env=api_key_env,
        environment_label=environment_label,
        thinking=thinking.value if thinking else None,
        host=state.host_of_run(run_id),  # answers come through the run's SSH forward; checks run here
        allow_shared_engine=allow_shared_engine,
        wait_for_engine=wait_for_engine,
        max_error_rate=max_error_rate,
    )
    if not 0.0 <= max_error_rate <= 1.0:
        raise BadInput(f"--max-error-rate {max_error_rate:g}: give a share from 0 to 1 (0.1 is 10 %).")
    if suite.startswith("lm-eval:"):
        _lm_eval(runs, suite, request, concurrency, timeout, as_json, limit)
        return
    if limit is not None:
        raise BadInput(f"--limit is for lm-eval task sets (lm-eval:TASK); suite {suite} is labctl's own: run it whole.")
    chosen = load_suite(state.lab(), suite)
    live = sys.stderr.isatty() and not as_json

    def progress(done: int, total: int) -> None:
        if live:
            sys.stderr.write(f"\r{done}/{total} (answers, then checks)")
            sys.stderr.flush()

    result, path = run_eval(runs, chosen, request, concurrency, timeout, progress)
    if live:
        sys.stderr.write("\n")
    if result.get("cut_off_while_reasoning"):  # on stderr with --json too: the score alone does not say why
        warn(
            f"warning: {result['cut_off_while_reasoning']} case(s) cut off while reasoning: max_tokens ran out "
            "before any answer (the suite's defaults.thinking_allowance gives a thinking model room)"
        )
    if as_json:
        print(json.dumps(result))
    else:
        _print_eval(result, path)
    if result["status"] == "partial":
        warn(
            f"Error: the evaluation is partial: {result['unanswered']} of {result['total']} cases got no answer "
            f"(more than {max_error_rate:.0%}); the engine or the link failed, not only the model. Result: {path}"
        )
        raise typer.Exit(1)


def _lm_eval(
    runs: Any, suite: str, request: Any, concurrency: int, timeout: float, as_json: bool, limit: int | None
) -> None:
    from labctl.quality.lm_eval_run import run_lm_eval

    progress = sys.stderr.isatty() and not as_json
    result, path = run_lm_eval(runs, state.lab(), suite, request, concurrency, timeout, progress=progress, limit=limit)
    if result.get("smoke"):  # on stderr with --json too
        warn(f"smoke run: each task's first {limit} documents only (--limit); never compared with a full run")
    if as_json:
        print(json.dumps(result))
        return
    out(
        f"eval {result['eval_id']}: {result['suite']['name']} ({result['suite']['full_version']}) on "
        f"{result['target']['engine']}/{result['target']['profile']}: {result['passed']}/{result['total']} right"
    )
    rows = [
        [
            t["name"],
            f"{t['task']} v{t['version']}",
            t["dataset"]["source"],
            str(t["num_fewshot"]),
            f"{t['metric']},{t['filter']}",
            "-" if t["value"] is None else f"{t['value']:.4f}",
            "-" if t["stderr"] is None else f"± {t['stderr']:.4f}",
        ]
        for t in result["tasks"]
    ]
    out(table(rows, ["SET", "TASK", "DATASET", "SHOTS", "METRIC", "VALUE", "STDERR"]))
    out(f"result: {path} (samples: {path.with_name(result['samples_file'])})")


def _print_eval(result: dict[str, Any], path: Path) -> None:
    out(
        f"eval {result['eval_id']}: {result['suite']['name']} {result['suite']['full_version']} on "
        f"{result['target']['engine']}/{result['target']['profile']}: {result['passed']}/{result['total']} "
        f"passed ({result['score']:.1%}; 95% Wilson interval {_interval(result)})"
    )
    failed = [c for c in result["cases"] if not c["passed"]]
    if failed:
        out(table([[c["id"], c["check"], c["reason"][:90]] for c in failed], ["FAILED CASE", "CHECK", "REASON"]))
    if result.get("shared_engine"):
        warn(f"warning: measured beside {result['shared_engine']['holder']} (--allow-shared-engine)")
    out(f"result: {path}")
    if result["passed"] == 0:
        warn("warning: no case passed")


def compare(
    ids: Annotated[
        list[str], typer.Argument(callback=result_ids_arg, help="Bench ids (or run ids: their latest complete result).")
    ],
    fmt: Annotated[str, typer.Option("--format", help="table, markdown, csv or json.")] = "table",
    allow_mismatch: Annotated[
        bool, typer.Option(help="Show results measured under different rules, cells marked ✗.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The same as --format json.")] = False,
) -> None:
    """Put results side by side only when measured under the same rules (checklist first).

    Example: labctl compare b20261203-020000-aaaaaa b20261203-021500-bbbbbb --format markdown
    """
    from labctl.compare.formats import FORMATS, render
    from labctl.compare.rules import compare as gather
    from labctl.errors import BadInput

    fmt = "json" if as_json else fmt
    if fmt not in FORMATS:
        raise BadInput(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}.")
    checks, rows, entries = gather(state.runs(), ids, skip)
    failed = ", ".join(c.rule for c in checks if not c.ok and c.blocking)
    _refuse_mixed(
        checks,
        allow_mismatch,
        f"these results were not measured under the same rules ({failed}): no table. "
        "Pass --allow-mismatch to see them side by side with the differing cells marked.",
    )
    out(render(checks, rows, entries, fmt).rstrip("\n"))


def report(
    ids: Annotated[
        list[str],
        typer.Argument(
            callback=result_ids_arg,
            help="Bench ids, or run ids: a run's newest complete result (with one id, the report names the run's "
            "other results; give a bench id to report one of those).",
        ),
    ],
    output: Annotated[str, typer.Option("-o", "--output", help="The report folder to write.")],
    allow_mismatch: Annotated[
        bool, typer.Option(help="Report results measured under different rules (marked).")
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option(
            help="Replace an existing folder that is not a labctl report, or one holding files labctl did not "
            "write (a labctl report, marked by its .labctl-report file listing its files, is replaced without it)."
        ),
    ] = False,
) -> None:
    """Write a report folder: Markdown, PNG plots and a static index.html.

    Two or more ids: the comparison, checklist first. One id: the report of that result alone, its setup,
    levels, caveats and plots, nothing compared.

    Example: labctl report b20261203-020000-aaaaaa b20261203-021500-bbbbbb -o qwen3-32b-report
    """
    from labctl.compare.report_folder import write_report
    from labctl.compare.rules import compare as gather
    from labctl.host.files.outputs import check_report_target, output_path

    target = output_path(output)
    check_report_target(target, overwrite)  # refused before any result is read or plot drawn
    if len(ids) == 1:
        from labctl.compare.single import choice_line, load_one, write_one_result_report

        one = load_one(state.runs(), ids[0], skip)
        chosen = choice_line(one)
        if chosen:
            warn(chosen)
        out(str(write_one_result_report(target, one, overwrite) / "index.html"))
        return
    checks, rows, entries = gather(state.runs(), ids, skip)
    _refuse_mixed(
        checks,
        allow_mismatch,
        "these results were not measured under the same rules: no report. Pass "
        "--allow-mismatch to write one with the differing cells marked.",
    )
    folder = write_report(target, checks, rows, entries, overwrite)
    out(str(folder / "index.html"))


def _refuse_mixed(checks: list[Any], allow_mismatch: bool, message: str) -> None:
    """Print the checklist and refuse when a rule failed, unless the user asked for a marked mix."""
    from labctl.compare.formats import checklist_lines
    from labctl.errors import BadInput

    if not all(c.ok for c in checks if c.blocking) and not allow_mismatch:
        out("\n".join(checklist_lines(checks)))
        raise BadInput(message)


def list_evaluations(
    run_id: Annotated[
        str,
        run_argument("The run whose evaluations to list."),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List a run's evaluations.

    Example: labctl eval list 20261203-015815-a1b2c3
    """
    from labctl.quality.evals import list_evals

    evals = list_evals(state.runs(), run_id, skipped=skip)
    if as_json:
        print(
            json.dumps(
                [
                    {k: e.get(k) for k in ("eval_id", "suite", "score", "passed", "total", "score_ci95", "created_at")}
                    for e in evals
                ]
            )
        )
        return
    rows = [
        [
            e["eval_id"],
            e["suite"]["name"],
            e["suite"]["full_version"],
            "failed" if e["score"] is None else f"{e['score']:.1%}",
            f"{e['passed']}/{e['total']}",
            _interval(e),
            e["created_at"][:19],
        ]
        for e in evals
    ]
    out(
        table(rows, ["EVAL", "SUITE", "VERSION", "SCORE", "N/N", "95% INTERVAL", "CREATED"])
        if rows
        else f"no evaluations for run {run_id}"
    )


def _interval(result: dict[str, Any]) -> str:
    interval = result.get("score_ci95")  # absent from evaluations made before intervals
    return f"{interval[0]:.0%}–{interval[1]:.0%}" if interval else "-"


def diff_evaluations(
    first: Annotated[str, typer.Argument(callback=eval_id_arg, help="An evaluation id.")],
    second: Annotated[
        str, typer.Argument(callback=eval_id_arg, help="Another evaluation id of the same suite version.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the flipped cases as JSON.")] = False,
) -> None:
    """List the cases that flipped between two evaluations of one suite version.

    Example: labctl eval diff e20261203-020000-aaaaaa e20261203-030000-bbbbbb
    """
    from labctl.quality.evaluate import diff_evals, find_eval, paired_evals

    runs = state.runs()
    a, b = find_eval(runs, first), find_eval(runs, second)
    flips = diff_evals(a, b)
    if as_json:
        print(json.dumps(flips))
        return
    out(f"A {first}, B {second}: {paired_evals(a, b).line()}")
    if not flips:
        out("no case flipped")
    for f in flips:
        out(f"{f['id']}: {f['was']} -> {f['now']} ({f['reason'][:100]})")
        out(f"  A said: {_one_line(f['output_was'])}")
        out(f"  B said: {_one_line(f['output_now'])}")


def _one_line(text: str, width: int = 160) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
