"""Resident deployments: an engine kept up for days for colleagues, behind keys, with an owner.
This module decides what a resident `up` needs, before anything starts."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from labctl.catalog.profiles import Profile
from labctl.errors import BadInput
from labctl.run.resident.keys import generate_keys, read_key_file

RESTART_POLICY = "unless-stopped"


def flag_key_note(engine: str) -> str:
    """Who can see a key the engine takes on its command line (auth kind `flag`, SGLang): said once by `up`
    and `share`, and in the resident deployments guide (docs/guides/resident.md)."""
    return (
        f"{engine} takes its API key on its command line: every local user of the engine's host can read it "
        "with `ps` (unless /proc is mounted hidepid=2), and docker-group members with `docker top` or "
        "`docker exec`; it is in no compose file, record or `docker inspect`. Share this deployment only "
        "with people who may log in to that host, or use an engine that reads its key from a file or variable."
    )


@dataclass
class ResidentPlan:
    keys: list[str] = field(repr=False)
    warnings: list[str]
    allow_no_auth: bool


def check_bind(bind: str | None) -> str | None:
    if bind is None:
        return None
    try:
        ipaddress.ip_address(bind)
    except ValueError:
        raise BadInput(f"--bind {bind!r} is not an IP address: give one such as 127.0.0.1 or 0.0.0.0.") from None
    return bind


def is_loopback(host: str) -> bool:
    return ipaddress.ip_address(host).is_loopback


def plan_resident(profile: Profile, key_file: str | None, keys: int | None, allow_no_auth: bool) -> ResidentPlan:
    engine = profile.engine
    auth = engine.auth
    warnings = []
    if not engine.resident_suited:
        warnings.append(
            f"{engine.name} is a poor fit for a resident multi-user deployment: "
            f"{engine.resident_note or 'see its engine definition'}"
        )
    if key_file and keys:
        raise BadInput("give either --key-file FILE or --keys N, not both.")
    if auth.kind == "none":
        if key_file or keys:
            raise BadInput(f"{engine.name} has no API-key option ({auth.note or 'no auth'}): drop --key-file/--keys.")
        if not is_loopback(profile.bind_address) and not allow_no_auth:
            raise BadInput(
                f"{engine.name} cannot check API keys, and --bind {profile.bind_address} opens it beyond this "
                "host: anyone who can reach it can use it. Bind 127.0.0.1, put an authenticating proxy in "
                "front, or pass --allow-no-auth (recorded)."
            )
        warnings.append(
            f"{engine.name} serves without API keys" + (" (--allow-no-auth)" if allow_no_auth else " (loopback only)")
        )
        return ResidentPlan(keys=[], warnings=warnings, allow_no_auth=allow_no_auth)
    if auth.kind == "flag":
        warnings.append(flag_key_note(engine.name))
    chosen = read_key_file(key_file) if key_file else generate_keys(keys or 1)
    if len(chosen) > 1 and not auth.multiple_keys:
        raise BadInput(f"{engine.name} accepts a single API key; give one (--keys 1, or one line in --key-file).")
    return ResidentPlan(keys=chosen, warnings=warnings, allow_no_auth=allow_no_auth)


def image_user_ids(user: str) -> tuple[int, int] | None:
    """The uid:gid an image runs as, when numeric ('' means root); None for a user name."""
    if not user:
        return (0, 0)
    uid, _, gid = user.partition(":")
    if re.fullmatch(r"[0-9]{1,10}", uid) and (not gid or re.fullmatch(r"[0-9]{1,10}", gid)):
        return (int(uid), int(gid or uid))
    return None
