"""engines, profiles, validate, render: what the lab knows and what a profile renders to."""

from __future__ import annotations

from typing import Annotated

import typer

from labctl.cli.context import complete_engine, complete_profile, listing, out, state, warn


def register(app: typer.Typer) -> None:
    app.command("engines")(engines)
    app.command("profiles")(profiles)
    app.command("validate")(validate)
    app.command("render")(render)


def engines(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the engines this lab knows.

    Example: labctl engines
    """
    from labctl.catalog.engines import list_engine_names, load_engine

    lab = state.lab()
    rows = []
    for name in list_engine_names(lab):
        engine = load_engine(lab, name)
        gpu = "none" if not engine.needs_gpu else (",".join(engine.gpu_archs) or "any NVIDIA")
        rows.append([name, engine.title, engine.image_repository, str(engine.default_port), gpu, engine.auth.kind])
    listing(rows, ["ENGINE", "TITLE", "IMAGE", "PORT", "GPU", "AUTH"], as_json)


def profiles(
    engine: Annotated[
        str | None, typer.Argument(autocompletion=complete_engine, help="Only this engine's profiles.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List launch profiles with their pinning and support-matrix status.

    Example: labctl profiles sglang
    """
    from labctl.catalog.engines import list_engine_names, load_engine
    from labctl.catalog.profiles import list_profile_names, load_profile
    from labctl.errors import LabctlError

    lab = state.lab()
    names = [engine] if engine else list_engine_names(lab)
    rows = []
    for engine_name in names:
        load_engine(lab, engine_name)
        for name in list_profile_names(lab, engine_name):
            try:
                profile = load_profile(lab, engine_name, name, allow_unsupported=True)
            except LabctlError as exc:
                rows.append([engine_name, name, "-", "-", f"INVALID: {exc}"])
                continue
            model = profile.model
            support = "supported" if profile.support_problem is None else "UNSUPPORTED"
            support += ", LEGACY" if profile.legacy else ""
            pin = "pinned" if profile.pinned else "UNPINNED"
            rows.append([engine_name, name, f"{model.id}@{model.revision}", pin, support])
    listing(rows, ["ENGINE", "PROFILE", "MODEL@REVISION", "IMAGE", "SUPPORT"], as_json)


def validate(
    engine: Annotated[
        str | None, typer.Argument(autocompletion=complete_engine, help="Only this engine (default: every engine).")
    ] = None,
    profile: Annotated[
        str | None, typer.Option("--profile", "-p", autocompletion=complete_profile, help="Only this profile.")
    ] = None,
    allow_unsupported: Annotated[
        bool, typer.Option(help="Accept family x quantization outside the support matrix.")
    ] = False,
    allow_uncontracted: Annotated[
        bool, typer.Option(help="Accept an engine version that has no CLI contract file (its argv goes unchecked).")
    ] = False,
) -> None:
    """Check engine definitions and profiles (and, with no ENGINE, every workload: its fields, and a dataset's distinct prompts against what its levels send); exit 2 naming the file, field and line of the first problem.

    Example: labctl validate sglang --profile qwen3-32b
    """
    from labctl.compose.contract_check import validate_lab

    lines = validate_lab(state.lab(), engine, profile, allow_unsupported, allow_uncontracted)
    for line in lines:
        out(line)
    if engine is None and profile is None:
        from labctl.bench.prompt_slots import check_lab_workloads
        from labctl.bench.workloads import list_workloads

        for note in check_lab_workloads(state.lab()):
            warn(note)
        out(f"ok: {len(list_workloads(state.lab()))} workload(s) valid, none asking for more prompts than it holds")
    out(f"ok: {sum(1 for line in lines if not line.startswith(' '))} profile(s) valid")


def render(
    engine: Annotated[str, typer.Argument(autocompletion=complete_engine, help="The engine, e.g. sglang.")],
    profile: Annotated[
        str,
        typer.Option("--profile", "-p", autocompletion=complete_profile, help="The launch profile, e.g. qwen3-32b."),
    ],
    stdout: Annotated[bool, typer.Option("--stdout", help="Print the compose file instead of writing it.")] = False,
    allow_unsupported: Annotated[
        bool, typer.Option(help="Render a family x quantization outside the support matrix (labelled).")
    ] = False,
    gpus: Annotated[str | None, typer.Option(help="GPU ids on this host, e.g. 0,1 (default: the profile's).")] = None,
    port: Annotated[int | None, typer.Option(help="Port on this host (default: the profile's).")] = None,
    cache_dir: Annotated[
        str | None, typer.Option(envvar="LABCTL_CACHE_DIR", help="Host model cache (default: ~/.cache/huggingface).")
    ] = None,
) -> None:
    """Render compose/ENGINE-PROFILE.yaml from a profile and print its path.

    Example: labctl render sglang --profile qwen3-32b --stdout
    """
    from labctl.catalog.profiles import (
        load_profile,
        parse_gpu_ids,
        parse_port,
        with_overrides,
    )
    from labctl.compose.options import render_options
    from labctl.compose.render import render_compose, save_compose

    lab = state.lab()
    loaded = load_profile(lab, engine, profile, allow_unsupported=allow_unsupported)
    placed = with_overrides(loaded, gpus=parse_gpu_ids(gpus), port=parse_port(port))
    if placed.support_problem:
        warn(f"warning: {placed.support_problem} (rendered because of --allow-unsupported; labelled)")
    text = render_compose(lab, placed, render_options(placed, cache_dir, allow_unsupported=allow_unsupported))
    if stdout:
        print(text, end="")
    else:
        out(str(save_compose(lab, placed, text)))
