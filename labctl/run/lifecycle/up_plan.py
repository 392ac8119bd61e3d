"""What one `labctl up` (or `reproduce`) asks for, and the check of all of it before anything happens.

`plan_up` is pure: it reads the lab and the flags and refuses what can be refused. Only after it passes does
`up` ask Docker, fetch, pull, write keys or a record, or start a container, so that a refusal leaves the home,
the host and the caches as they were."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labctl.catalog.hosts_file import LOCAL_HOST, HostEntry
from labctl.catalog.http_contracts import HttpContract, contract_for
from labctl.catalog.lab import Lab
from labctl.catalog.limits import check_seconds
from labctl.catalog.new_lab import NEW_LAB_FOLDER
from labctl.catalog.profiles import Profile, load_profile, printable, with_overrides
from labctl.compose.contract_check import Verdict, check_profile, refuse_unless_valid
from labctl.compose.options import check_cache_dir, render_options
from labctl.compose.render import render_compose
from labctl.errors import BadInput
from labctl.host.identity import current_user
from labctl.run.images.copy import check_copy_request
from labctl.run.images.pin import pin_command
from labctl.run.resident.keys import MAX_KEYS
from labctl.run.resident.lockdown import check_proxied, needs_proxy
from labctl.run.resident.resident_plan import ResidentPlan, check_bind, plan_resident

MAX_OWNER_CHARS = 64  # a user name; it is a container label and a column of `status`


@dataclass(frozen=True)
class UpRequest:
    """The per-run options of one `up` (or `reproduce`, or a study cell) as one value, whatever backend runs it."""

    engine: str
    profile: str
    gpus: list[str] | None = None
    port: int | None = None
    timeout: float = 900.0
    replace: bool = False
    allow_unpinned: bool = False
    allow_unsupported: bool = False
    owner: str | None = None
    cache_dir: str | None = None
    reproduced_from: str | None = None
    profile_override: Profile | None = None  # reproduce: the recorded resolved profile, not the lab's file
    resident: bool = False
    bind: str | None = None
    key_file: str | None = None
    keys: int | None = None
    allow_no_auth: bool = False
    allow_uncontracted: bool = False
    allow_unfit: bool = False
    copy_image: bool = False  # a host that cannot reach the registry: copy the pinned image from this controller
    fetch: bool = True  # download the model into the cache before anything starts (--no-fetch: the cache as is)
    host: HostEntry = LOCAL_HOST
    home: Path | None = None  # where keys live (the runs folder's home)
    minutes: int | None = None  # a cluster's job: its time limit (--time; default: the cluster's)


@dataclass(frozen=True)
class UpPlan:
    """A request that passed every check: the placed profile, its contract verdict, the resident plan."""

    profile: Profile
    contract: Verdict
    resident: ResidentPlan | None
    owner: str
    http_contract: HttpContract | None = None
    proxied: bool = False  # fronted by labctl's authenticating proxy (the engine's key leaves model routes open)


def check_owner(owner: str | None) -> str:
    """--owner, else the OS user: a name shown on terminals and pages and set as a container label."""
    if owner is None:
        return current_user()
    if not owner.strip() or len(owner) > MAX_OWNER_CHARS or not printable(owner):
        raise BadInput(
            f"--owner {owner[:80]!r}: give a name of 1 to {MAX_OWNER_CHARS} characters without control characters "
            "(a newline, ESC, …), or leave it out for your user name."
        )
    return owner


def load_placed_profile(lab: Lab, request: UpRequest) -> Profile:
    profile = request.profile_override or load_profile(
        lab, request.engine, request.profile, allow_unsupported=request.allow_unsupported
    )
    placed = with_overrides(profile, gpus=request.gpus, port=request.port, host=check_bind(request.bind))
    if not placed.pinned and not request.allow_unpinned:
        raise BadInput(unpinned_refusal(lab, placed))
    return placed


def unpinned_refusal(lab: Lab, profile: Profile) -> str:
    """The one line that refuses an unpinned profile off a terminal, naming the one command that pins it."""
    command = pin_command(lab, profile.engine.name, profile.name, NEW_LAB_FOLDER)
    return (
        f"profile {profile.engine.name}/{profile.name} uses {profile.image_text!r}, which is not pinned by digest "
        f"(a tag can point at another image tomorrow): pin it with `{command}` (on a terminal, `labctl up` offers "
        "to), or pass --allow-unpinned (the digest actually run is recorded either way)."
    )


def plan_up(lab: Lab, request: UpRequest) -> UpPlan:
    """Every refusal that depends on the request and the lab alone, before Docker is asked anything."""
    check_seconds("--timeout", request.timeout)
    if not request.resident and (request.bind or request.key_file or request.keys is not None or request.allow_no_auth):
        raise BadInput("--bind, --key-file, --keys and --allow-no-auth are for resident deployments: add --resident.")
    if request.keys is not None and not 1 <= request.keys <= MAX_KEYS:
        raise BadInput(f"--keys {request.keys}: give a number of keys from 1 to {MAX_KEYS}.")
    owner = check_owner(request.owner)
    check_cache_dir(request.cache_dir, request.host.name if request.host.is_remote and request.fetch else None)
    profile = load_placed_profile(lab, request)
    if request.copy_image:
        check_copy_request(profile, request.host)
    contract = check_profile(profile, request.resident, request.allow_uncontracted)
    refuse_unless_valid(contract)
    resident = (
        plan_resident(profile, request.key_file, request.keys, request.allow_no_auth) if request.resident else None
    )
    http_contract = contract_for(lab, profile.engine.name, profile.engine_version)
    proxied = bool(resident and resident.keys and needs_proxy(http_contract))
    if proxied:
        assert resident is not None
        check_proxied(profile, resident.keys)
    # The setup must render: a template or profile that cannot is refused here, not after keys, an image pull
    # or a record exist. The run's labels and key folder, known later, add only quoted values.
    render_compose(
        lab, profile, render_options(profile, request.cache_dir, allow_unsupported=request.allow_unsupported)
    )
    return UpPlan(
        profile=profile,
        contract=contract,
        resident=resident,
        owner=owner,
        http_contract=http_contract,
        proxied=proxied,
    )
