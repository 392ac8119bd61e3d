"""export, reproduce, diff: rebuilding a colleague's setup and comparing two setups."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from labctl.cli.context import (
    HOST_HELP,
    CopyImage,
    complete_host,
    out,
    run_argument,
    run_or_file_arg,
    state,
    table,
    warn,
)

if TYPE_CHECKING:
    pass


def register(app: typer.Typer) -> None:
    app.command("export")(export)
    app.command("reproduce")(reproduce)
    app.command("diff")(diff)


def export(
    run_id: Annotated[str, run_argument("The run to export.")],
    output: Annotated[str | None, typer.Option("-o", "--output", help="Write here (default: print).")] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            help="Replace an existing file that is not a labctl export (a labctl export is replaced without it)."
        ),
    ] = False,
) -> None:
    """Write one self-contained file (record, resolved profile, compose file) that rebuilds the run.

    Example: labctl export 20261203-015815-a1b2c3 -o alice-sglang.yaml
    """
    from labctl.host.files.outputs import output_path, write_output_file
    from labctl.run.records.export import dump_export, export_from_run, is_labctl_export

    target = output_path(output) if output is not None else None
    text = dump_export(export_from_run(state.runs(), run_id).doc)
    if target is not None:
        write_output_file(target, text, overwrite, is_labctl_export, "an export")
        out(str(target))
    else:
        sys.stdout.write(text)


def reproduce(
    source: Annotated[
        str,
        run_argument("An export file or a run id.", run_or_file_arg),
    ],
    gpus: Annotated[str | None, typer.Option(help="GPU ids on this host (default: the original's).")] = None,
    port: Annotated[int | None, typer.Option(help="Port on this host (default: the original's).")] = None,
    cache_dir: Annotated[str | None, typer.Option(help="Model cache on this host.")] = None,
    allow_render_drift: Annotated[
        bool, typer.Option(help="Run the setup as it renders here now when that differs from the record (recorded).")
    ] = False,
    force: Annotated[bool, typer.Option(hidden=True, help="Old spelling of --allow-render-drift.")] = False,
    owner: Annotated[str | None, typer.Option(help="Who owns the new run.")] = None,
    bind: Annotated[
        str | None, typer.Option(help="Address to bind (default 127.0.0.1; the original's is only shown).")
    ] = None,
    replace: Annotated[
        bool, typer.Option(help="Stop whoever holds the GPUs or port first (both records say so).")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for readiness.")] = 900.0,
    as_json: Annotated[bool, typer.Option("--json", help="End with the new run's summary as JSON.")] = False,
    host: Annotated[str | None, typer.Option("--host", autocompletion=complete_host, help=HOST_HELP)] = None,
    copy_image: CopyImage = False,
    fetch: Annotated[
        bool,
        typer.Option("--fetch/--no-fetch", help="Download the model into the cache first (default), as up does."),
    ] = True,
) -> None:
    """Rebuild a recorded setup here: same image digest, engine args and model revision; new run linked to it.

    Example: labctl reproduce alice-sglang.yaml --port 30001
    """
    import json

    from labctl.catalog.profiles import parse_gpu_ids, parse_port
    from labctl.run.lifecycle.reproduce import ReproduceRequest

    backend = state.backend(host)
    request = ReproduceRequest(
        source=source,
        gpus=parse_gpu_ids(gpus),
        port=parse_port(port),
        cache_dir=cache_dir,
        force=allow_render_drift or force,
        owner=owner,
        timeout=timeout,
        bind=bind,
        replace=replace,
        fetch=fetch,
        copy_image=copy_image,
    )
    record = backend.reproduce(state.lab(), state.runs(), request, warn)
    if as_json:
        print(json.dumps(record.summary() | {"reproduced_from": record.reproduced_from}))
        return
    same = record.reproduction is not None and record.reproduction.compose_sha256_matches
    out(
        f"reproduced run {record.reproduced_from} as run {record.run_id}: {record.base_url} "
        f"(model {record.served_model_name})"
    )
    out(
        f"  digest {record.image.digest}, compose hash {record.setup.get('compose_sha256')}"
        f" ({'same as' if same else 'DIFFERENT from'} the original)"
    )
    out(f"  record {record.record_path}")


def diff(
    a: Annotated[
        str,
        run_argument("A run id or an export file.", run_or_file_arg),
    ],
    b: Annotated[
        str,
        run_argument("Another run id or export file.", run_or_file_arg),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows and the verdict as JSON.")] = False,
) -> None:
    """Compare two setups field by field; exit 0 when identical, 1 when they differ.

    Example: labctl diff 20261203-015815-a1b2c3 alice-sglang.yaml
    """
    from labctl.run.records.diff import diff_setups

    result = diff_setups(state.lab(), state.runs(), a, b)
    if as_json:
        out(json.dumps(result.to_json()))
        if result.differing:
            raise typer.Exit(1)
        return
    marks = {True: "=", False: "≠"}
    out(
        table(
            [
                [field + ("" if kind == "setup" else f" ({kind})"), marks[same], va, vb]
                for field, va, vb, same, kind in result.rows
            ],
            ["FIELD", "", a[:40], b[:40]],
        )
    )
    if result.differing:
        out(f"setups differ in: {', '.join(result.differing)}")
        raise typer.Exit(1)
    out("setups are identical (host-specific and informational rows aside)")
