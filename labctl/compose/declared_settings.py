"""A profile's effective settings as its rendered command and its engine's folder state them (the defaults with
where each was read), and, given what the engine reported, as the engine ran them."""

from __future__ import annotations

from labctl.catalog.engine_settings import Effective, from_command, from_report, resolve
from labctl.catalog.profiles import Profile
from labctl.compose.render import serve_command


def effective_settings(profile: Profile, reported: str | None = None) -> dict[str, Effective] | None:
    """Setting -> value and whence: the engine's report (its answer at the folder's report route) first, then
    the command labctl renders and the options file it writes, then the folder's defaults. None: the folder
    states no settings."""
    rules = profile.engine.setting_rules
    if rules is None:
        return None
    options = profile.engine.options_file
    command = from_command(rules, serve_command(profile, None).words, options.content if options else None)
    return resolve(rules, command, None if reported is None else from_report(rules, reported))
