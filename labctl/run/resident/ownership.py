"""The one rule for acting on somebody else's run: a resident deployment belongs to its owner, and
stopping, replacing or re-keying another owner's deployment needs --force with a --reason (recorded)."""

from __future__ import annotations

from labctl.errors import BadInput


def needs_force(owner: str, resident: bool, me: str) -> bool:
    return resident and owner != me


def check_may_act(
    run_id: str, owner: str, resident: bool, me: str, action: str, force: bool, reason: str | None
) -> bool:
    """Refuse (exit 2) unless `me` may do `action` to the run; returns whether --force was what allowed it."""
    if not needs_force(owner, resident, me):
        return False
    if not force or not reason:
        raise BadInput(
            f"run {run_id} is {owner}'s resident deployment: {action} it needs "
            f'--force --reason "why" (both are recorded).'
        )
    return True


def check_force(force: bool, reason: str | None) -> None:
    """--force is only ever acting on another owner's run, and always says why: refused alone, up front."""
    if force and not (reason and reason.strip()):
        raise BadInput('--force needs --reason "why" (both are recorded).')
