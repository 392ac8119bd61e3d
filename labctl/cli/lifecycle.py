"""up, down, status, logs, runs, show, pin: starting engines, seeing them, stopping them."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, Optional

import typer

from labctl.cli.context import out, state, table, warn


def register(app: typer.Typer) -> None:
    for name, func in (("up", up), ("down", down), ("status", status), ("logs", logs), ("runs", runs),
                       ("show", show), ("pin", pin), ("share", share), ("rotate-key", rotate_key)):
        app.command(name)(func)



def _progress() -> Any:
    """A live status line on a terminal; silence elsewhere (logs and CI stay clean)."""
    if not sys.stderr.isatty():
        return None

    def show(text: str) -> None:
        sys.stderr.write("\r\033[K" + text[:150])
        sys.stderr.flush()

    return show


def up(
    engine: Annotated[str, typer.Argument(help="The engine, e.g. sglang.")],
    profile: Annotated[str, typer.Option("--profile", "-p", help="The launch profile.")],
    gpus: Annotated[Optional[str], typer.Option(help="GPU ids on this host, e.g. 0,1 (default: the profile's).")] = None,
    port: Annotated[Optional[int], typer.Option(help="Port on this host (default: the profile's).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for readiness.")] = 900.0,
    replace: Annotated[bool, typer.Option(help="Stop whoever holds the GPUs or port first (both records say so).")] = False,
    allow_unpinned: Annotated[bool, typer.Option(help="Run a profile whose image is not pinned by digest.")] = False,
    allow_unsupported: Annotated[bool, typer.Option(help="Accept family x quantization outside the support matrix.")] = False,
    owner: Annotated[Optional[str], typer.Option(help="Who owns this run (default: your user name).")] = None,
    cache_dir: Annotated[Optional[str], typer.Option(help="Host model cache (default: $LABCTL_CACHE_DIR or ~/.cache/huggingface).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="End with the run's summary as one JSON object.")] = False,
    resident: Annotated[bool, typer.Option(help="A deployment kept up for days: restarts unless stopped, API keys, owner.")] = False,
    bind: Annotated[Optional[str], typer.Option(help="Resident: the address the engine binds (default: the profile's).")] = None,
    key_file: Annotated[Optional[str], typer.Option(help="Resident: API keys, one per line (mode 600).")] = None,
    keys: Annotated[Optional[int], typer.Option(help="Resident: generate N API keys (default 1).")] = None,
    allow_no_auth: Annotated[bool, typer.Option(help="Resident: serve an engine without key support beyond loopback.")] = False,
) -> None:
    """Start one engine from a profile, wait until its OpenAI API answers, and record the run.

    Example: labctl up sglang --profile qwen3-32b --gpus 0
    """
    from labctl.lifecycle import UpRequest, summary
    from labctl.lifecycle import up as start
    from labctl.profiles import parse_gpu_ids, parse_port

    request = UpRequest(engine=engine, profile=profile, gpus=parse_gpu_ids(gpus), port=parse_port(port), timeout=timeout,
                        replace=replace, allow_unpinned=allow_unpinned, allow_unsupported=allow_unsupported,
                        owner=owner, cache_dir=cache_dir, quiet_pull=as_json or not sys.stderr.isatty(),
                        resident=resident, bind=bind, key_file=key_file, keys=keys, allow_no_auth=allow_no_auth)
    record = start(state.lab(), state.runs(), request, say=warn, progress=_progress())
    info = summary(record)
    if as_json:
        print(json.dumps(info))
        return
    t = record["timings"]
    out(f"ready: {info['engine']}/{info['profile']} run {info['run_id']}")
    out(f"  OpenAI base URL  {info['base_url']}  (model {info['model']})")
    out(f"  image            {record['image']['reference']}  digest {record['image']['digest']}")
    out(f"  cold start       {t['cold_start_s']} s (port open {t['port_open_s']} s, ready {t['ready_s']} s)"
        + (f", image pull {t['image_pull_s']} s" if t.get("image_pull_s") else ""))
    out(f"  record           {info['record']}")
    if record.get("resident"):
        out(f"  resident         restart {record['resident']['restart_policy']}, {record['resident']['keys']} API key(s); "
            f"share access with: labctl share {info['run_id']}")
    out(f"  stop it with     labctl down {info['run_id']}")


def down(
    target: Annotated[Optional[str], typer.Argument(help="A run id or an engine name (default: the only running run).")] = None,
    reason: Annotated[Optional[str], typer.Option(help="Why (recorded).")] = None,
    force: Annotated[bool, typer.Option(help="Stop another owner's resident deployment (needs --reason).")] = False,
) -> None:
    """Stop and remove a run's containers; the record gets stopped_at and who.

    Example: labctl down 20261203-015815-a1b2c3
    """
    from labctl.errors import BadInput
    from labctl.inventory import live_runs
    from labctl.teardown import stop_run
    from labctl.records import current_user, is_run_id

    runs = state.runs()
    live = live_runs(runs, probe=False)
    if target is None:
        chosen = live
        if len(chosen) > 1:
            raise BadInput("several runs are up: name one (labctl down RUN_ID). Up now: "
                           + ", ".join(f"{r['run_id']} ({r['engine']}/{r['profile']})" for r in chosen))
    else:
        chosen = [r for r in live if target in (r["run_id"], r["engine"])]
        if not chosen and is_run_id(target) and runs.exists(target):
            raise BadInput(f"run {target} is not up (its record says {runs.load(target)['status']}).")
    if not chosen:
        raise BadInput(f"nothing to stop{' matching ' + repr(target) if target else ''}: see `labctl status`.")
    me = current_user()
    for run in chosen:
        if run["resident"] and run["owner"] != me:
            if not force or not reason:
                raise BadInput(f"run {run['run_id']} is {run['owner']}'s resident deployment: stopping it needs "
                               f"--force --reason \"why\" (both are recorded).")
        stop_run(runs, run["run_id"], by=me, reason=reason, forced=force and run["owner"] != me)
        out(f"stopped {run['run_id']} ({run['engine']}/{run['profile']})")


def status(as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False) -> None:
    """Every labctl engine on this host: run, engine/profile, GPUs, endpoint, health now, uptime, owner.

    Example: labctl status --json
    """
    from labctl.deployments import observe
    from labctl.inventory import live_runs

    store = state.runs()
    live = live_runs(store)
    for run in live:
        observe(store, run)
    if as_json:
        print(json.dumps(live))
        return
    if not live:
        out("no labctl engine is running on this host")
        return
    rows = [[r["run_id"], f"{r['engine']}/{r['profile']}", ",".join(r["gpus"]) or "-", r["base_url"], r["health"],
             _uptime(r["uptime_s"]), r["owner"], r["since"][:19], str(r["restarts"]), "yes" if r["resident"] else "no",
             _count(r["requests_served"]), _count(r["tokens_served"])] for r in live]
    out(table(rows, ["RUN", "ENGINE/PROFILE", "GPUS", "BASE URL", "HEALTH", "UP", "OWNER", "SINCE", "RESTARTS",
                     "RESIDENT", "REQUESTS", "TOKENS"]))


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def logs(
    run_id: Annotated[str, typer.Argument(help="The run id.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
) -> None:
    """Print an engine's logs (live from the container, or saved with the record once it stopped).

    Example: labctl logs 20261203-015815-a1b2c3 -f
    """
    from labctl import docker as dk
    from labctl.errors import BadInput

    runs = state.runs()
    containers = [c for c in dk.labctl_containers(run_id=run_id) if dk.service_of(c) == "serve"]
    if containers:
        if follow:
            for line in dk.follow_logs(containers[0]):
                sys.stdout.write(line.decode(errors="replace"))
                sys.stdout.flush()
        else:
            sys.stdout.write(dk.logs_tail(containers[0], 1_000_000))
        return
    saved = runs.dir(run_id) / "serve.log"
    if saved.is_file():
        sys.stdout.write(saved.read_text(errors="replace"))
        return
    raise BadInput(f"no container and no saved logs for run {run_id}. See `labctl runs`.")


def runs() -> None:
    """List run records, newest last.

    Example: labctl runs
    """
    store = state.runs()
    rows = []
    for run_id in store.all_ids():
        r = store.load(run_id)
        rows.append([run_id, f"{r['engine']}/{r['profile']}", r["status"], r["environment_label"], r["owner"],
                     (r.get("image") or {}).get("digest") or "-"])
    if not rows:
        out(f"no runs under {store.root}")
        return
    out(table([[*row[:5], row[5][:19]] for row in rows], ["RUN", "ENGINE/PROFILE", "STATUS", "ENVIRONMENT", "OWNER", "DIGEST"]))


def show(
    run_id: Annotated[str, typer.Argument(help="The run id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole record as JSON.")] = False,
    docker_run: Annotated[bool, typer.Option("--docker-run", help="Print the equivalent plain `docker run` command.")] = False,
) -> None:
    """Print one run record (or the plain `docker run` command that starts the same engine).

    Example: labctl show 20261203-015815-a1b2c3 --docker-run
    """
    runs = state.runs()
    record = runs.load(run_id)
    if docker_run:
        from labctl.docker_run import docker_run_commands
        from labctl.setups import digest_reference

        pinned = digest_reference(record["resolved_profile"], record["image"].get("digest"))
        compose_text = (runs.dir(run_id) / "compose.yaml").read_text(encoding="utf-8")
        for line in docker_run_commands(compose_text, pinned, f"labctl-{run_id}"):
            out(line)
        return
    if as_json:
        print(json.dumps(record, indent=2))
        return
    for key in ("run_id", "status", "reason", "engine", "profile", "profile_sha256", "environment_label", "owner",
                "user", "host", "created_at", "ready_at", "stopped_at", "stopped_by", "served_model_name"):
        if record.get(key) is not None:
            out(f"{key:<18} {record[key]}")
    image = record.get("image") or {}
    out(f"{'image':<18} {image.get('reference')}")
    out(f"{'digest':<18} {image.get('digest')}  (image id {image.get('image_id')})")
    out(f"{'base_url':<18} {record['endpoint']['base_url']}")
    out(f"{'gpus':<18} {','.join(record['gpus']['ids']) or '-'}")
    if record.get("container"):
        out(f"{'command':<18} {' '.join(record['container']['command_line'])}")
    out(f"{'timings':<18} {json.dumps(record.get('timings', {}))}")


def pin(
    engine: Annotated[str, typer.Argument(help="The engine.")],
    profile: Annotated[str, typer.Option("--profile", "-p", help="The profile to pin.")],
) -> None:
    """Resolve the profile's image tag to its registry digest and write it into the profile.

    Example: labctl pin harness --profile smoke
    """
    from labctl.pinning import pin_profile

    old, new = pin_profile(state.lab(), engine, profile)
    out(f"pinned {engine}/{profile}: {old} -> {new}")


def share(
    run_id: Annotated[str, typer.Argument(help="The resident run.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print base_url, model and api_key as JSON.")] = False,
) -> None:
    """Show how to reach a resident deployment: base URL, model, key, and snippets (the only place a key is shown).

    Example: labctl share 20261203-015815-a1b2c3
    """
    from labctl.deployments import share as access
    from labctl.deployments import snippets

    info = access(state.runs(), run_id)
    if as_json:
        print(json.dumps({"base_url": info["base_url"], "model": info["model"], "api_key": info["api_key"]}))
        return
    out(f"base URL  {info['base_url']}\nmodel     {info['model']}\nAPI key   {info['api_key'] or '(none: the engine has no key support)'}")
    if len(info["api_keys"]) > 1:
        out("other keys: " + ", ".join(info["api_keys"][1:]))
    out("")
    out(snippets(info))


def rotate_key(
    run_id: Annotated[str, typer.Argument(help="The resident run.")],
    key_file: Annotated[Optional[str], typer.Option(help="Take the new keys from this file (mode 600).")] = None,
    keys: Annotated[Optional[int], typer.Option(help="Generate N new keys (default: as many as before).")] = None,
) -> None:
    """Replace a resident deployment's API keys and restart its engine with them; old keys stop working.

    Example: labctl rotate-key 20261203-015815-a1b2c3
    """
    from labctl.deployments import rotate_key as rotate
    from labctl.records import current_user

    resident = rotate(state.runs(), run_id, current_user(), key_file, keys)
    out(f"rotated {resident['keys']} key(s) of run {run_id} ({', '.join(resident['key_fingerprints'])}); "
        f"hand them out with: labctl share {run_id}")
