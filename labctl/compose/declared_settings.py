"""A profile's effective settings as its rendered command and its engine's folder state them (the defaults with
where each was read), and, given what the engine reported, as the engine ran them."""

from __future__ import annotations

from labctl.catalog.batch_cap import BatchCap
from labctl.catalog.engine_settings import BATCH_CAP, UNKNOWN, Effective, from_command, from_report, resolve
from labctl.catalog.profiles import Profile
from labctl.compose.render import serve_command


def effective_settings(profile: Profile, reported: str | None = None) -> dict[str, Effective] | None:
    """Setting -> value and whence: the engine's report (its answer at the folder's report route) first, then
    the command labctl renders and the options file it writes, then the folder's defaults; the batch cap as the
    folder's batch_cap block reads it from the command. None: the folder states no settings."""
    rules = profile.engine.setting_rules
    if rules is None:
        return None
    options = profile.engine.options_file
    words = serve_command(profile, None).words
    command = from_command(rules, words, options.content if options else None)
    found = resolve(rules, command, None if reported is None else from_report(rules, reported))
    found[BATCH_CAP] = cap_setting(profile.engine.batch_cap_rule.read(words, "the command line"))
    return found


def cap_setting(cap: BatchCap) -> Effective:
    """The batch cap as an effective setting: set on the command line, else the engine's stated default."""
    if cap.value is None:
        return Effective(UNKNOWN, "unknown", cap.source)
    if cap.source.startswith("set on"):
        return Effective(str(cap.value), "command", cap.flag, str(cap.value))
    return Effective(
        str(cap.value), "default", f"{cap.flag}: {cap.source.removeprefix('its default: ')}", str(cap.value)
    )
