"""bench: fixed-workload load tests against a labctl run or any OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from labctl.cli.context import (
    HOST_HELP,
    SHARED_HELP,
    WAIT_HELP,
    Thinking,
    bench_id_arg,
    complete_host,
    complete_workload,
    listing,
    out,
    run_argument,
    skip,
    state,
    table,
    warn,
)
from labctl.cli.groups import GroupWithDefault
from labctl.cli.terminal import inert_value

if TYPE_CHECKING:
    from labctl.bench.metric_table import Metric
    from labctl.bench.results import BenchResult, Level


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        cls=GroupWithDefault,
        no_args_is_help=True,
        help="Load tests with fixed workloads: run, list, show.\n\nExample: labctl bench run 20261203-015815-a1b2c3 --workload chat-sweep --concurrency 1,8,64",
    )
    group.command("run")(run)
    group.command("list")(list_results)
    group.command("show")(show)
    app.add_typer(group, name="bench")
    app.command("workloads")(workloads)


def _levels(text: str | None) -> list[int] | None:
    from labctl.errors import BadInput

    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise BadInput(f"--concurrency {text!r}: expected whole numbers separated by commas, e.g. 1,8,64.") from None


def _rates(text: str | None) -> list[float] | None:
    from labctl.errors import BadInput

    if text is None:
        return None
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise BadInput(f"--request-rate {text[:80]!r}: expected numbers separated by commas, e.g. 1,2,4.") from None


def workloads(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the workloads in this lab with their content hashes.

    Example: labctl workloads
    """
    from labctl.bench.workloads import list_workloads, load_workload
    from labctl.errors import BadInput

    lab = state.lab()
    rows = []
    for name in list_workloads(lab):
        try:
            w = load_workload(lab, name)
        except BadInput as exc:
            skip(f"skipped workload {name}: {exc}")
            continue
        rows.append([name, ",".join(map(str, w.concurrency)), w.sha256[:12], w.description])
    listing(rows, ["WORKLOAD", "CONCURRENCY", "SHA256", "DESCRIPTION"], as_json)


def run(
    run_id: Annotated[
        str | None,
        run_argument("A running labctl run (or use --base-url and --model)."),
    ] = None,
    workload: Annotated[
        str | None, typer.Option(autocompletion=complete_workload, help="The workload name (workloads/NAME.yaml).")
    ] = None,
    base_url: Annotated[
        str | None, typer.Option(help="Any OpenAI-compatible base URL, e.g. http://host:8000/v1.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="The served model name (with --base-url).")] = None,
    concurrency: Annotated[str | None, typer.Option(help="Override the levels, e.g. 1,8,64.")] = None,
    requests: Annotated[int | None, typer.Option(help="Override the measured requests per level.")] = None,
    request_rate: Annotated[
        str | None,
        typer.Option(help="Override the arrival rate(s) in req/s, e.g. 1,2,4: one level per rate (open loop)."),
    ] = None,
    find_max_rate: Annotated[
        bool,
        typer.Option(
            help="Search for the highest request rate whose goodput meets the SLO: a level passes when >= 90% "
            "of its requests meet every SLO and the client sends at >= 95% of its arrival schedule's rate; double the rate while "
            "passing (halve while not), then bisect until pass and fail are within 10%; at most 16 levels, at "
            "the workload's top concurrency."
        ),
    ] = False,
    slo: Annotated[
        str | None, typer.Option(help="Override the SLO for goodput, in ms, e.g. ttft_ms=500,tpot_ms=50.")
    ] = None,
    input_len: Annotated[
        int | None, typer.Option(help="Override the prompt length (random, shared-prefix, multi-turn).")
    ] = None,
    output_len: Annotated[
        int | None, typer.Option(help="Override the output length (random, shared-prefix, multi-turn).")
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="A local model folder holding tokenizer.json, or a Hub repository (owner/name) whose tokenizer is "
            "already in the HF cache: it counts prompt lengths (default: the run's model; without one, lengths are "
            "in words, said so)."
        ),
    ] = None,
    api_key_env: Annotated[str | None, typer.Option(help="Name of the variable holding the API key.")] = None,
    environment_label: Annotated[str, typer.Option(help="Label for an endpoint labctl did not start.")] = "external",
    thinking: Annotated[
        Thinking | None,
        typer.Option(help="An endpoint labctl did not start: off asks every chat request not to think."),
    ] = None,
    request_timeout: Annotated[float, typer.Option(help="Seconds one request may take in all.")] = 120.0,
    deadline: Annotated[
        float, typer.Option(help="Seconds the whole bench may take (default 6 h); the partial result is kept.")
    ] = 6 * 3600.0,
    allow_over_batch_limit: Annotated[
        bool, typer.Option(help="Run levels above a TensorRT engine's built max batch size (marked).")
    ] = False,
    force: Annotated[bool, typer.Option(hidden=True, help="Old spelling of --allow-over-batch-limit.")] = False,
    repeat: Annotated[
        int, typer.Option(help="Run each level N times; intervals then come from the per-run values.")
    ] = 1,
    telemetry: Annotated[
        bool, typer.Option(help="Sample the GPUs (nvidia-smi) and the engine's /metrics once a second.")
    ] = True,
    client_workers: Annotated[
        int,
        typer.Option(
            help="Client processes that share each level's streams, on one clock (default 1). One process times up "
            "to about 600 streams right; give one per free core for more (its lag and CPU are flagged)."
        ),
    ] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole result as one JSON document.")] = False,
    host: Annotated[str | None, typer.Option("--host", autocompletion=complete_host, help=HOST_HELP)] = None,
    allow_shared_engine: Annotated[bool, typer.Option(help=SHARED_HELP)] = False,
    wait_for_engine: Annotated[float, typer.Option(help=WAIT_HELP)] = 0.0,
    max_error_rate: Annotated[
        float,
        typer.Option(
            help="The share of a level's requests that may fail (default 0.1 = 10%); above it the level and the "
            "result are partial, and the command exits 1."
        ),
    ] = 0.1,
) -> None:
    """Load-test an engine with a fixed workload; results go beside the run's record.

    Example: labctl bench run 20261203-015815-a1b2c3 --workload chat-sweep --concurrency 1,8,64
    """
    from labctl.bench.bench_request import BenchRequest
    from labctl.bench.session import run_bench
    from labctl.bench.workloads import load_workload, parse_slo, with_overrides
    from labctl.catalog.engines import lab_batch_caps, lab_telemetry
    from labctl.errors import BadInput

    state.choose_host(host)
    state.follow_run(run_id)
    runs = state.runs()
    if not workload:
        raise BadInput("--workload NAME is required (see `labctl workloads`).")
    chosen = with_overrides(
        load_workload(state.lab(), workload),
        _levels(concurrency),
        requests,
        input_len,
        output_len,
        _rates(request_rate),
        parse_slo(slo) if slo is not None else None,
    )
    request = BenchRequest(
        workload=chosen,
        run_id=run_id,
        base_url=base_url,
        model=model,
        api_key_env=api_key_env,
        force=allow_over_batch_limit or force,
        request_timeout=request_timeout,
        deadline=deadline,
        environment_label=environment_label,
        thinking=thinking.value if thinking else None,
        find_max_rate=find_max_rate,
        tokenizer=tokenizer,
        repeat=repeat,
        telemetry=telemetry,
        host=state.host(),
        allow_shared_engine=allow_shared_engine,
        wait_for_engine=wait_for_engine,
        max_error_rate=max_error_rate,
        engines=lab_telemetry(state.lab()),
        batch_caps=lab_batch_caps(state.lab()),
        client_workers=client_workers,
    )
    with _progress() as progress:
        result, path = run_bench(runs, request, progress, warn)
    if as_json:
        print(json.dumps(result.to_json()))
    else:
        print_result(result, str(path))
    if result.status == "partial":
        partial = [str(level.concurrency) for level in result.levels if level.partial]
        warn(
            f"Error: the result is partial: more than {max_error_rate:.0%} of the requests failed at c="
            f"{','.join(partial)}; its figures describe the requests that succeeded only. Result: {path}"
        )
        raise typer.Exit(1)


class _progress:
    """A progress bar on a terminal; elsewhere (a pipe, a CI log) a plain line every quarter of a phase or
    every PLAIN_EVERY seconds, each with the whole sweep's ETA."""

    PLAIN_EVERY = 10.0

    def __init__(self) -> None:
        self.live = sys.stderr.isatty()
        self.bar: Any = None
        self.task: Any = None
        self.phase = ""
        self.last_line = 0.0

    def __enter__(self) -> Any:
        if self.live:
            from rich.console import Console
            from rich.progress import Progress

            # on stderr, like every other progress line: stdout is for the result (--json)
            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
        return self.update

    def update(self, phase: str, done: int, total: int, eta: float | None) -> None:
        from labctl.bench.sweep_plan import SweepClock

        if self.bar is not None:
            if phase != self.phase:
                if self.task is not None:
                    self.bar.remove_task(self.task)
                self.task = self.bar.add_task(phase, total=total)
                self.phase = phase
            self.bar.update(self.task, completed=done, description=f"{phase} (sweep ETA {SweepClock.clock(eta)})")
            return
        now = time.monotonic()
        step = max(1, -(-total // 4))
        if done == total or done % step == 0 or now - self.last_line >= self.PLAIN_EVERY:
            self.last_line = now
            warn(f"{phase}: {done}/{total} requests, sweep ETA {SweepClock.clock(eta)}")

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _flag(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_flag(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={_flag(v)}" for k, v in value.items())
    return f"{value:g}" if isinstance(value, float) else str(value)


def _figure(metric: Metric, value: float | None) -> str:
    """A zero throughput is no measurement ("-"); a zero goodput is one (no request met the SLO)."""
    if value is None or (not value and metric.better == "higher" and metric.key != "goodput"):
        return "-"
    return f"{value:.{metric.digits}f}"


def print_result(result: BenchResult, path: str) -> None:
    from labctl.bench.metric_table import View, shown_in

    target, workload = result.target, result.workload
    v = inert_value  # values read from the result file, each kept on this one line
    out(
        f"bench {v(result.bench_id)} ({v(result.status)}): {v(target.engine)}/{v(target.profile)} "
        f"[{v(target.environment_label)}] model {v(target.model)}, workload {v(workload.name)} ({v(workload.sha256[:12])})"
    )
    if workload.overrides:
        flags = " ".join(f"{o.flag} {_flag(o.value)}" for o in workload.overrides)
        out(f"overrides: {flags} (the file's sha256: {str(workload.file_sha256)[:12]})")
    columns = shown_in(View.BENCH_TABLE)
    cap = target.batch_cap
    rows = []
    for level in result.levels:
        above = cap is not None and bool(cap.above([level.concurrency]))
        rows.append(
            [
                str(level.concurrency) + (" !" if level.over_max_batch_size or above else ""),
                "-" if not level.target_rate else f"{level.target_rate:g}",
                f"{level.completed}/{level.requests}",
                *[_figure(metric, level.value(metric)) for metric in columns],
                "-" if level.client_cpu_share is None else f"{level.client_cpu_share:.0%}",
            ]
        )
    out(table(rows, ["CONC", "RATE", "OK/SENT", *[metric.heading for metric in columns], "CLIENT CPU"]))
    if cap is not None:  # under the table: the table stays right under the heading lines
        out(
            f"batch cap: {cap.text}"
            + (" (! above it: requests queue)" if cap.above([lv.concurrency for lv in result.levels]) else "")
        )
    if workload.dataset is not None:
        d = workload.dataset
        out(f"dataset: {v(d.repo)}@{v(d.revision)} (commit {v(str(d.commit))}), {v(d.file)}")
    if workload.prompts is not None:
        p = workload.prompts
        held = f" of the {p.available} the dataset holds" if p.available is not None else ""
        again = " (repeat_prompts: sent more than once on purpose)" if p.repeat_prompts else ""
        out(f"prompts: {p.sent} sent, {p.distinct} distinct{held}; seed {p.seed}{again}")
    for level in result.levels:
        out(_level_detail(level))
        schedule = _schedule_line(level)
        if schedule:
            out(schedule)
    missing = (result.telemetry or {}).get("missing")
    for name, why in (missing if isinstance(missing, dict) else {}).items():
        out(f"telemetry {name}: {why}")
    for warning in result.warnings:
        out(f"warning: {warning}")
    if result.interrupted_reason:
        out(f"interrupted: {result.interrupted_reason}")
    if result.failure:
        out(f"failed: {result.failure}")
    found = result.max_rate_meeting_slo
    if found:
        out(f"max_rate_meeting_slo: {found.note} (SLO {_flag(found.slo)}; {found.rule})")
    folder = Path(path).parent
    for key, name in (("requests_file", result.requests_file), ("telemetry_file", result.telemetry_file)):
        if name and (folder / name).is_file():
            out(f"{key.replace('_', ' ')}: {folder / name}")
        elif name:  # a killed bench names the file it was writing, which may never have been closed
            out(f"{key.replace('_', ' ')}: none ({name} was not written: the bench ended before it)")
    out(f"(ms; TTFT = first token-bearing chunk; TPOT = (e2e-ttft)/(n-1); ITL = pooled chunk gaps)  result: {path}")


def _ci(interval: tuple[float, ...] | None) -> str:
    return "-" if not interval else f"[{interval[0]:.1f}, {interval[1]:.1f}]"


def _schedule_line(level: Level) -> str | None:
    """How the level's sending went where its shape says more than its table row: the duration that stopped it,
    and the open-loop sender's own lateness against its schedule (rates and traces)."""
    parts = []
    if level.duration_limit_s and level.unsent:
        parts.append(
            f"stopped sending at its duration of {level.duration_limit_s:g} s, {level.unsent} prompt(s) unsent"
        )
    elif level.duration_limit_s:
        parts.append(f"every prompt sent within its duration of {level.duration_limit_s:g} s")
    if level.send_lag_p99_ms is not None and level.send_lag_max_ms is not None:
        parts.append(f"send lag p99 {level.send_lag_p99_ms:.1f} ms, max {level.send_lag_max_ms:.1f} ms")
    if level.loop_late_p99_ms is not None and level.loop_late_max_ms is not None:
        parts.append(f"client loop late p99 {level.loop_late_p99_ms:.1f} ms, max {level.loop_late_max_ms:.1f} ms")
    if level.client_workers > 1:
        busiest = level.client_cpu_busiest_share
        parts.append(
            f"{level.client_workers} worker processes"
            + ("" if busiest is None else f", the busiest at {busiest:.0%} of a core")
        )
    return f"c={level.concurrency} client: " + "; ".join(parts) if parts else None


def _level_detail(level: Level) -> str:
    """One line per level: the 95 % intervals of the headline figures, and what telemetry saw."""
    from labctl.bench.metric_table import View, shown_in

    intervals = [f"{metric.label} {_ci(level.interval(metric))}" for metric in shown_in(View.BENCH_INTERVALS)]
    parts = [f"c={level.concurrency}" + (f" x{level.repeat}" if level.repeat > 1 else ""), *intervals]
    basis = f"Student-t, {level.interval_basis}" if level.repeat > 1 else f"bootstrap, {level.interval_basis}"
    parts[1] = f"95% ({basis}) {parts[1]}"  # said once, before the first interval
    telemetry = level.telemetry or {}
    for index, gpu in _mapping(_mapping(telemetry.get("gpu")).get("gpus")).items():
        util = _mapping(_mapping(gpu).get("utilization_gpu_pct"))
        simulated = " simulated" if str(_mapping(gpu).get("name", "")).startswith("Simulated ") else ""
        if _numbers(util, "mean", "max"):
            parts.append(f"GPU{index}{simulated} util mean {util['mean']:.0f}% max {util['max']:.0f}%")
    engine = _mapping(telemetry.get("engine"))
    for name in ("running", "waiting"):
        value = _mapping(engine.get(name))
        if _numbers(value, "mean", "max"):
            parts.append(f"{name} mean {value['mean']:.2f} max {value['max']:.2f}")
    # a fraction in the result (kv_cache_usage in results written before the name said so), a % here
    kv = _mapping(engine.get("kv_cache_usage_fraction") or engine.get("kv_cache_usage"))
    if _numbers(kv, "mean", "max"):
        ranks = kv.get("ranks") if _numbers(kv, "ranks", "rank_max") else None
        busiest = f" (busiest of {ranks:g} ranks max {kv['rank_max']:.1%})" if ranks and ranks > 1 else ""
        parts.append(f"KV cache mean {kv['mean']:.1%} max {kv['max']:.1%}{busiest}")
    return "  ".join(parts)


def _mapping(value: Any) -> dict[str, Any]:
    """Telemetry is free-form (each source says what it has): a part of the wrong shape is left out."""
    return value if isinstance(value, dict) else {}


def _numbers(value: dict[str, Any], *keys: str) -> bool:
    return all(isinstance(value.get(k), int | float) and not isinstance(value.get(k), bool) for k in keys) and bool(
        value.get(keys[0])
    )


def list_results(
    run_id: Annotated[str, run_argument("The run whose results to list.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List a run's bench results.

    Example: labctl bench list 20261203-015815-a1b2c3
    """
    from labctl.bench.results import list_results as results_of

    results = results_of(state.runs(), run_id, skipped=skip)  # one left `running` by a killed bench: interrupted
    if as_json:
        print(
            json.dumps(
                [{k: r.to_json().get(k) for k in ("bench_id", "status", "created_at", "workload")} for r in results]
            )
        )
        return
    rows = [
        [
            r.bench_id,
            r.workload.name,
            r.workload.sha256[:12],
            r.status,
            ",".join(str(level.concurrency) for level in r.levels),
            r.created_at[:19],
        ]
        for r in results
    ]
    out(
        table(rows, ["BENCH", "WORKLOAD", "SHA256", "STATUS", "LEVELS", "CREATED"])
        if rows
        else f"no bench results for run {run_id}"
    )


def show(
    bench_id: Annotated[str, typer.Argument(callback=bench_id_arg, help="The bench result id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole result file as JSON.")] = False,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="table (for people), or one row per level with every metric and its 95 % interval: csv, "
            "markdown or json.",
        ),
    ] = "table",
) -> None:
    """Print one bench result (or export its levels: --format csv|markdown|json).

    Example: labctl bench show latest --format csv
    """
    from labctl.bench.results import find_result
    from labctl.compare import result_export as export
    from labctl.errors import BadInput

    if fmt not in export.FORMATS:
        raise BadInput(f"--format {fmt[:40]!r}: one of {', '.join(export.FORMATS)}.")
    result, path = find_result(state.runs(), bench_id)
    if as_json:
        print(json.dumps(result.to_json(), indent=1))
    elif fmt == "table":
        print_result(result, str(path))
    else:
        rows = export.result_rows(result)
        sys.stdout.write({"csv": export.as_csv, "markdown": export.as_markdown, "json": export.as_json}[fmt](rows))
