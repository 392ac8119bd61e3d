"""`up` of an unpinned profile on a terminal: show what pinning resolves, ask once, pin into the user's own lab
(made first when the lab in use is the read-only one that ships with labctl), and let `up` go on. Off a
terminal `up` refuses it with the one command that pins it (labctl/run/lifecycle/up_plan.py)."""

from __future__ import annotations

import sys

import typer

from labctl.cli.context import state, warn


def on_a_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def offer_pin(engine: str, profile: str) -> bool:
    """Pin an unpinned profile after asking, on a terminal; whether the lab in use changed (to the user's own)."""
    from labctl.catalog.new_lab import NEW_LAB_FOLDER, check_target
    from labctl.catalog.profiles import load_profile
    from labctl.cli.init import make_own_lab
    from labctl.errors import BadInput
    from labctl.run.images.pin import pin_command, pin_lines, plan_pin, write_pin
    from labctl.run.lifecycle.up_plan import unpinned_refusal

    lab = state.lab()
    loaded = load_profile(lab, engine, profile, allow_unsupported=True)
    if loaded.pinned or not on_a_terminal():
        return False  # pinned, or refused by `up` itself with the one command
    plan = plan_pin(lab, engine, profile)
    target = check_target(NEW_LAB_FOLDER) if lab.packaged else None  # refused before asking when it cannot be made
    assert loaded.source is not None
    written = (target / loaded.source.path.relative_to(lab.root)) if target else loaded.source.path
    warn(f"profile {engine}/{profile} is not pinned. Pinning it for host {state.host().name} resolves:")
    for line in pin_lines(plan):
        warn(line)
    if target is not None:
        warn(
            f"The lab in use ships with labctl and is read-only: labctl first makes your own lab in {target} and "
            f"records it as your default lab (what `labctl init {NEW_LAB_FOLDER}` does)."
        )
    warn(f"Pinning writes {written} (what `{pin_command(lab, engine, profile, NEW_LAB_FOLDER)}` does).")
    if not typer.confirm("Pin it and go on?", default=False, err=True):
        raise BadInput(unpinned_refusal(lab, loaded))
    if target is not None:
        state.use_lab(make_own_lab(str(target), say=warn))
    write_pin(state.lab(), plan)
    commit = f", {plan.pinned.model} at commit {plan.pinned.commit}" if plan.pinned.commit else ""
    warn(f"pinned {engine}/{profile}: {plan.pinned.new}{commit}")
    return target is not None
