"""up, down, status, logs, runs, show, pin: starting engines, seeing them, stopping them."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from labctl.cli.context import (
    HOST_HELP,
    CopyImage,
    complete_engine,
    complete_host,
    complete_profile,
    complete_workload,
    listing,
    out,
    run_argument,
    run_or_engine_arg,
    skip,
    state,
    table,
    warn,
)
from labctl.cli.terminal import inert_value
from labctl.host.files.disk import size_text


def register(app: typer.Typer) -> None:
    for name, func in (
        ("up", up),
        ("down", down),
        ("status", status),
        ("logs", logs),
        ("runs", runs),
        ("show", show),
        ("pin", pin),
        ("gc", gc),
        ("share", share),
        ("rotate-key", rotate_key),
    ):
        app.command(name)(func)


def _progress() -> Any:
    """A live status line on a terminal; silence elsewhere (logs and CI stay clean)."""
    if not sys.stderr.isatty():
        return None

    def show(text: str) -> None:
        sys.stderr.write("\r\033[K" + inert_value(text[:150]))
        sys.stderr.flush()

    return show


def up(
    engine: Annotated[str, typer.Argument(autocompletion=complete_engine, help="The engine, e.g. sglang.")],
    profile: Annotated[
        str, typer.Option("--profile", "-p", autocompletion=complete_profile, help="The launch profile.")
    ],
    gpus: Annotated[str | None, typer.Option(help="GPU ids on this host, e.g. 0,1 (default: the profile's).")] = None,
    port: Annotated[int | None, typer.Option(help="Port on this host (default: the profile's).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for readiness.")] = 900.0,
    replace: Annotated[
        bool, typer.Option(help="Stop whoever holds the GPUs or port first (both records say so).")
    ] = False,
    allow_unpinned: Annotated[bool, typer.Option(help="Run a profile whose image is not pinned by digest.")] = False,
    allow_unsupported: Annotated[
        bool, typer.Option(help="Accept family x quantization outside the support matrix.")
    ] = False,
    owner: Annotated[str | None, typer.Option(help="Who owns this run (default: your user name).")] = None,
    cache_dir: Annotated[
        str | None, typer.Option(envvar="LABCTL_CACHE_DIR", help="Host model cache (default: ~/.cache/huggingface).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="End with the run's summary as one JSON object.")] = False,
    resident: Annotated[
        bool, typer.Option(help="A deployment kept up for days: restarts unless stopped, API keys, owner.")
    ] = False,
    bind: Annotated[
        str | None, typer.Option(help="Resident: the address the engine binds (default: the profile's).")
    ] = None,
    key_file: Annotated[str | None, typer.Option(help="Resident: API keys, one per line (mode 600).")] = None,
    keys: Annotated[int | None, typer.Option(help="Resident: generate N API keys (default 1).")] = None,
    allow_unfit: Annotated[
        bool, typer.Option(help="Start even when the memory-fit estimate says the model does not fit (recorded).")
    ] = False,
    allow_uncontracted: Annotated[
        bool, typer.Option(help="Start an engine version that has no CLI contract file (recorded).")
    ] = False,
    allow_no_auth: Annotated[
        bool, typer.Option(help="Resident: serve an engine without key support beyond loopback.")
    ] = False,
    host: Annotated[str | None, typer.Option("--host", autocompletion=complete_host, help=HOST_HELP)] = None,
    copy_image: CopyImage = False,
    fetch: Annotated[
        bool,
        typer.Option(
            "--fetch/--no-fetch",
            help="Download the model into the cache first (default); --no-fetch starts from the cache as it is.",
        ),
    ] = True,
    time_limit: Annotated[
        int | None,
        typer.Option("--time", help="A Slurm cluster: the job's time limit in whole minutes (default: the cluster's)."),
    ] = None,
) -> None:
    """Start one engine from a profile, wait until its OpenAI API answers, and record the run.

    With --host naming a Slurm cluster, labctl submits a batch job (sbatch --gres=gpu:N, N from --gpus as a
    count, else the profile's) and Slurm alone chooses the node and the GPUs; labctl shows the job's state
    and Slurm's reason while it is queued and records the queue wait apart from cold start.

    A missing image is pulled (by digest when pinned); the harness engine's image, unpinned and missing on this
    machine's Docker, is built by labctl from the lab's engines/harness/Dockerfile and pushed when its registry
    answers (the record says how it was built, and holds a digest only when the registry gave one).

    A profile whose image is not pinned by digest is refused (exit 2, naming the command that pins it) unless
    --allow-unpinned; on a terminal, `up` shows what pinning resolves (image tag -> digest, and the commit the
    model revision names now), asks once, pins it (into a lab of your own, made first when the lab in use ships with labctl) and
    goes on.

    Example: labctl up sglang --profile qwen3-32b
    """
    from labctl.catalog.profiles import parse_port
    from labctl.cli.pin_offer import offer_pin
    from labctl.run.lifecycle.up_plan import UpRequest

    backend = state.backend(host)
    if not allow_unpinned and not backend.queues and offer_pin(engine, profile):
        backend = state.backend(host)  # the lab of your own, just made: its hosts file may name the host anew
    request = UpRequest(
        engine=engine,
        profile=profile,
        gpus=backend.parse_gpus(gpus),
        port=parse_port(port),
        timeout=timeout,
        replace=replace,
        allow_unpinned=allow_unpinned,
        allow_unsupported=allow_unsupported,
        owner=owner,
        cache_dir=cache_dir,
        resident=resident,
        bind=bind,
        key_file=key_file,
        keys=keys,
        allow_no_auth=allow_no_auth,
        allow_uncontracted=allow_uncontracted,
        allow_unfit=allow_unfit,
        fetch=fetch,
        copy_image=copy_image,
        minutes=time_limit,
    )
    record = backend.start(state.lab(), state.runs(), request, say=warn, progress=_progress())
    if as_json:
        print(json.dumps(backend.summary(record)))
        return
    for line in backend.ready_lines(record):
        out(line)


def _gc_cluster(name: str, yes: bool, as_json: bool) -> None:
    from labctl.errors import BadInput
    from labctl.run.backends.kinds import claimed

    backend = claimed(state.lab_root(), name)
    if backend is None:
        raise BadInput(f"--cluster {name!r}: no hosts file names that cluster.")
    found = backend.leftovers(remove=yes)
    kept = [f for f in found if f.kept]
    if as_json:
        rows = [
            {"node": f.where, "container": f.container, "job_id": f.owner, "removed": f.removed, "kept": f.kept or None}
            for f in found
        ]
        print(json.dumps(rows))
    elif not found:
        out(f"nothing to collect on cluster {name}: every engine container belongs to a job that has not ended")
    for f in [] if as_json else found:
        if f.kept:
            out(
                f"kept container {f.container[:12]} on {name}/{f.where} (job {f.owner}): {f.kept.removeprefix('kept: ')}"
            )
        else:
            ended = f"(job {f.owner or '?'} ended)"
            out(f"{'removed' if yes else 'leftover'} container {f.container[:12]} on {name}/{f.where} {ended}")
    if kept:  # what gc could not decide: a script must not read this run as complete
        raise typer.Exit(1)


def down(
    target: Annotated[
        str | None,
        run_argument("A run id or an engine name (default: your only running run in this home).", run_or_engine_arg),
    ] = None,
    reason: Annotated[str | None, typer.Option(help="Why (recorded).")] = None,
    force: Annotated[bool, typer.Option(help="Stop another owner's resident deployment (needs --reason).")] = False,
    all_runs: Annotated[bool, typer.Option("--all", help="With an engine name: stop all your runs of it.")] = False,
    host: Annotated[str | None, typer.Option("--host", autocompletion=complete_host, help=HOST_HELP)] = None,
) -> None:
    """Stop and remove a run's containers; the record gets stopped_at and who.

    Example: labctl down 20261203-015815-a1b2c3
    """
    from labctl.run.backends.backend import StopRequest

    def confirm(chosen: list[dict[str, object]]) -> bool:
        if not sys.stdin.isatty():
            return False
        return typer.confirm(f"stop {len(chosen)} runs ({', '.join(str(r['run_id']) for r in chosen)})?")

    state.choose_host(host)
    backend = state.backend_of_run(target)
    for run in backend.stop(state.runs(), StopRequest(target, reason, force, all_runs, confirm)):
        out(f"stopped {run.run_id} ({run.engine}/{run.profile}){run.detail}")
        for problem in run.problems:
            skip(problem)


def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    host: Annotated[
        str | None, typer.Option("--host", autocompletion=complete_host, help="Only this host (default: every host).")
    ] = None,
) -> None:
    """Every labctl engine on every host (or the --host one): run, engine/profile, GPUs, endpoint, health, owner.

    Exits 1 when a host or cluster did not answer (LABCTL_HOST_TIMEOUT_S, default 10 s) or what it found could
    not be recorded: the listing is then incomplete.

    Example: labctl status --json
    """
    from labctl.run.backends.kinds import status_sections

    host = host or state.global_cluster()
    if host is not None:
        sections = state.backend(host).status(state.runs())
    else:
        sections = status_sections(state.lab(), state.runs(), state.host_option)
    for section in sections:
        for note in section.notes:
            warn(note)
        for problem in section.skips:
            skip(problem)
    if as_json:
        silent = [  # after the runs: a reader that wants them all sees at once that some are missing
            {"run_id": None, "host": s.unreachable[0], "reachable": False, "problem": s.unreachable[1]}
            for s in sections
            if s.unreachable
        ]
        print(json.dumps([row for section in sections for row in section.json_rows] + silent))
        return
    for section in sections:
        if len(sections) > 1:
            out(f"== {section.title} ==")
        if section.problem:
            out(section.problem)
        elif not section.rows:
            out(section.empty)
        else:
            out(table([list(row) for row in section.rows], list(section.header)))


def logs(
    run_id: Annotated[str, run_argument("The run id.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines (a live engine).")] = False,
    tail: Annotated[int | None, typer.Option("--tail", "-n", help="Only the last N lines.")] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Only lines since: a time ago (30m, 2h, 3d) or a date or time (2026-12-07T04:00, UTC)."),
    ] = None,
    service: Annotated[str, typer.Option(help="serve (the engine) or build (TensorRT-LLM's engine build).")] = "serve",
    host: Annotated[str | None, typer.Option("--host", autocompletion=complete_host, help=HOST_HELP)] = None,
) -> None:
    """Print an engine's logs (live from the container, or saved with the record once it stopped).

    Example: labctl logs latest --tail 50
    """
    import datetime as dt

    from labctl.errors import BadInput
    from labctl.run.lifecycle.status import LogView
    from labctl.run.records.run_filter import parse_since

    if tail is not None and not 1 <= tail <= 1_000_000:
        raise BadInput(f"--tail {tail}: give a number of lines from 1 to 1000000.")
    start = parse_since(since, dt.datetime.now(dt.UTC)) if since is not None else None
    view = LogView(follow=follow, tail=tail, since=start)
    state.choose_host(host)
    for text in state.backend_of_run(run_id).logs(state.runs(), run_id, view, service):
        sys.stdout.write(text)
        sys.stdout.flush()


def runs(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    mine: Annotated[bool, typer.Option("--mine", help="Only the runs you own.")] = False,
    engine: Annotated[str | None, typer.Option(help="Only this engine's runs.")] = None,
    status: Annotated[str | None, typer.Option(help="Only runs in this state (running, stopped, failed, ...).")] = None,
    since: Annotated[
        str | None, typer.Option(help="Only runs made since: a time ago (30m, 2h, 3d, 1w) or a date (2026-12-07).")
    ] = None,
) -> None:
    """List run records, newest last, with when each was made.

    Example: labctl runs --mine --since 2d
    """
    import datetime as dt

    from labctl.errors import BadInput
    from labctl.host.identity import current_user
    from labctl.run.records.run_filter import RunFilter, parse_since

    wanted = RunFilter(
        owner=current_user() if mine else None,
        engine=engine,
        status=status,
        since=parse_since(since, dt.datetime.now(dt.UTC)) if since is not None else None,
    )
    store = state.runs()
    rows = []
    preps: list[dict[str, Any]] = []
    for run_id in store.all_ids():
        try:
            r = store.load(run_id)
        except BadInput as exc:
            skip(f"skipped run {run_id}: {exc}")
            continue
        if not wanted.keeps(r):
            continue
        created = r.created_at[:19].replace("T", " ")
        engine_profile = f"{r.engine}/{r.profile}"
        rows.append([run_id, created, engine_profile, r.status, r.environment_label, r.owner, r.image.digest or "-"])
        preps.append({name: part.to_json() for name, part in r.prep.items()})
    header = ["RUN", "CREATED (UTC)", "ENGINE/PROFILE", "STATUS", "ENVIRONMENT", "OWNER", "DIGEST"]
    if as_json:  # each run's prep parts too, as the record holds them
        keys = ["run", "created_at", "engine_profile", "status", "environment", "owner", "digest"]
        print(
            json.dumps(
                [{**dict(zip(keys, row, strict=True)), "prep": prep} for row, prep in zip(rows, preps, strict=True)]
            )
        )
        return
    listing([[*row[:6], row[6][:19]] for row in rows], header, as_json, empty=f"no runs under {store.root}")


def show(
    run_id: Annotated[str, run_argument("The run id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole record as JSON.")] = False,
    docker_run: Annotated[
        bool, typer.Option("--docker-run", help="Print the equivalent plain `docker run` command.")
    ] = False,
) -> None:
    """Print one run record (or the plain `docker run` command that starts the same engine).

    Example: labctl show 20261203-015815-a1b2c3 --docker-run
    """
    from labctl.run.records.store import describe, docker_run_lines

    state.follow_run(run_id)  # a resident run's restarts are read on its own host
    runs = state.runs()
    record = runs.load(run_id)
    if docker_run:
        for line in docker_run_lines(runs, record):
            out(line)
    elif as_json:
        print(json.dumps(record.to_json(), indent=2))
    else:
        from labctl.run.resident.deployments import describe_resident

        for key, value in describe(record) + describe_resident(runs, record):
            out(f"{key:<18} {inert_value(str(value))}")


def pin(
    engine: Annotated[str | None, typer.Argument(autocompletion=complete_engine, help="The engine.")] = None,
    profile: Annotated[
        str | None, typer.Option("--profile", "-p", autocompletion=complete_profile, help="The profile to pin.")
    ] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            autocompletion=complete_workload,
            help="Instead: a workload whose Hub dataset revision to resolve to a commit and write into its file.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was pinned as one JSON object.")] = False,
    host: Annotated[
        str | None,
        typer.Option(
            "--host", autocompletion=complete_host, help="The host whose platform (os/architecture) picks the digest."
        ),
    ] = None,
) -> None:
    """Ask the registry for the digest of the profile's image tag (this host's platform) and write it into the profile; nothing is pulled. It shows the commit the model's revision names now (each run records the commit it fetched). With --workload, ask the Hub which commit the workload's dataset revision names and write that instead; nothing is downloaded.

    Example: labctl pin sglang --profile qwen3-32b
    """
    import dataclasses

    from labctl.errors import BadInput
    from labctl.run.images.pin import pin_lines, plan_pin, write_pin

    if workload is not None:
        _pin_workload(workload, engine, profile, host, as_json)
        return
    if engine is None or profile is None:
        raise BadInput("give ENGINE and --profile NAME (an image), or --workload NAME (a dataset revision).")
    state.choose_host(host)
    lab = state.writable_lab(f"labctl pin {engine} --profile {profile}")
    plan = plan_pin(lab, engine, profile)
    pinned = write_pin(lab, plan)
    if as_json:
        print(json.dumps(dataclasses.asdict(pinned)))
        return
    out(f"pinned {engine}/{profile}:")
    for line in pin_lines(plan):
        out(line)


def _pin_workload(name: str, engine: str | None, profile: str | None, host: str | None, as_json: bool) -> None:
    from labctl.bench.dataset_pin import pin_workload
    from labctl.errors import BadInput

    if engine is not None or profile is not None or host is not None:
        raise BadInput("--workload pins a dataset revision: give it alone (no ENGINE, --profile or --host).")
    pinned = pin_workload(state.writable_lab(f"labctl pin --workload {name}"), name)
    if as_json:
        print(json.dumps({"workload": name, "old": pinned.old, "new": pinned.new, "file": str(pinned.path)}))
        return
    out(f"pinned workload {name}: dataset revision {pinned.old} -> {pinned.new} ({pinned.path})")


def gc(
    yes: Annotated[bool, typer.Option("--yes", help="Remove what is listed (default: only list it).")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the items (and what happened to each) as JSON.")
    ] = False,
    cluster_name: Annotated[
        str | None,
        typer.Option("--cluster", help="Instead: engine containers on a Slurm cluster's nodes whose job has ended."),
    ] = None,
) -> None:
    """List images, model and dataset snapshots and TensorRT-LLM engine folders this home pulled, built or fetched that nothing needs now; --yes removes them.

    Only what this home's own ledger (.state/acquired.jsonl) says labctl put there is listed, never what a
    container, a run that has not ended, another home's record or a profile of this lab uses.

    Example: labctl gc
    """
    from labctl.quality.tasks import pinned_datasets
    from labctl.run.models.gc import as_json as gc_json
    from labctl.run.models.gc import collect, find_garbage

    if cluster_name is not None:
        _gc_cluster(cluster_name, yes, as_json)
        return

    from labctl.bench.dataset_pin import workload_datasets

    tasks, workloads = pinned_datasets(state.lab()), workload_datasets(state.lab())
    kept = None if tasks is None or workloads is None else tasks | workloads
    garbage = find_garbage(state.lab(), state.runs(), state.host(), skip, kept)
    items = garbage.items
    refused = yes and bool(garbage.unreadable)
    outcomes = collect(items) if yes and not refused else []
    freed = sum(o.item.bytes for o in outcomes if o.removed)
    if refused:
        skip(
            f"removed nothing: {len(garbage.unreadable)} run record(s) of this home cannot be read (above), and "
            "gc cannot tell what they use. Restore them, or move their run folders out of runs/, then run "
            "labctl gc --yes again."
        )
    if as_json:
        print(json.dumps(gc_json(items, outcomes)))
        return
    if not items:
        out("nothing to collect: nothing this home pulled, built or fetched is unused")
        return
    out(
        table(
            [[i.kind, i.name, size_text(i.bytes), i.last_run, i.where] for i in items],
            ["KIND", "NAME", "SIZE", "LAST RUN", "WHERE"],
        )
    )
    total = sum(i.bytes for i in items)
    if refused:
        out(f"{len(items)} item(s), {size_text(total)}: nothing removed (a run record cannot be read)")
        return
    if not yes:
        out(f"{len(items)} item(s), {size_text(total)}: nothing removed; remove them with labctl gc --yes")
        return
    for outcome in outcomes:
        if not outcome.removed:
            warn(f"kept {outcome.item.kind} {outcome.item.name}: {outcome.problem}")
    removed = sum(1 for o in outcomes if o.removed)
    out(f"removed {removed} of {len(items)} item(s): {size_text(freed)} ({freed} bytes) freed")


def share(
    run_id: Annotated[str, run_argument("The resident run.")],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print base_url, model, api_key, key_visibility, host, ssh_forward, open_without_key (paths that "
            "answered without a key, measured after up; null when not measured), proxy and engine_port_open_without_key "
            "(behind the proxy: what the engine's own loopback port, open to the host's local users, serves without a "
            "key; null without a proxy), status and warning (set when the run is not running) as JSON.",
        ),
    ] = False,
) -> None:
    """Show how to reach a resident deployment: base URL (and the SSH forward a remote loopback needs), model, key, snippets (the only place a key is shown).

    Example: labctl share 20261203-015815-a1b2c3
    """
    from labctl.run.resident.deployments import share as access
    from labctl.run.resident.deployments import snippets

    info = access(state.runs(), run_id)
    if as_json:
        keys = (
            "base_url",
            "model",
            "api_key",
            "key_visibility",
            "host",
            "ssh_forward",
            "open_without_key",
            "proxy",
            "engine_port_open_without_key",
            "status",
            "warning",
        )
        print(json.dumps({k: info[k] for k in keys}))
        return
    if info["warning"]:
        warn(f"warning: {info['warning']}")
    if info["key_visibility"]:
        warn(f"note: {info['key_visibility']}")
    if info["ssh_forward"]:
        out(
            f"reach     the engine binds host {info['host']}'s loopback: open an SSH forward first (an account on "
            f"that host that may log in over SSH), keep it running, then use the base URL below:\n"
            f"          {info['ssh_forward']}"
        )
    out(
        f"base URL  {info['base_url']}\nmodel     {info['model']}\nAPI key   {info['api_key'] or '(none: the engine has no key support)'}"
    )
    if len(info["api_keys"]) > 1:
        out("other keys: " + ", ".join(info["api_keys"][1:]))
    if info["open"]:
        out(info["open"])
    if info["proxy"]:
        out(f"proxy     labctl's authenticating proxy ({info['proxy']}) fronts the engine, which listens on loopback")
    if info["engine_port"]:
        out(f"note      {info['engine_port']}")
    out(
        "owner     ownership is advisory: labctl records who started a deployment and refuses to stop another "
        "owner's without --force --reason, but anyone who can drive the host's Docker (its docker group, or the "
        "shared account of a remote host) can stop it"
    )
    out("")
    out(snippets(info))


def rotate_key(
    run_id: Annotated[str, run_argument("The resident run.")],
    key_file: Annotated[str | None, typer.Option(help="Take the new keys from this file (mode 600).")] = None,
    keys: Annotated[int | None, typer.Option(help="Generate N new keys (default: as many as before).")] = None,
    force: Annotated[bool, typer.Option(help="Rotate another owner's deployment (needs --reason).")] = False,
    reason: Annotated[str | None, typer.Option(help="Why (recorded).")] = None,
) -> None:
    """Replace a resident deployment's API keys and restart its engine with them (behind labctl's proxy only the proxy reloads); old keys stop working.

    Example: labctl rotate-key 20261203-015815-a1b2c3
    """
    from labctl.host.identity import current_user
    from labctl.run.resident.rotation import rotate_key as rotate

    state.follow_run(run_id)
    resident = rotate(
        state.runs(), run_id, current_user(), key_file, keys, force, reason, host=state.host(), lab=state.lab()
    )
    out(
        f"rotated {resident.keys} key(s) of run {run_id} ({', '.join(resident.key_fingerprints)}); "
        f"hand them out with: labctl share {run_id}"
    )
