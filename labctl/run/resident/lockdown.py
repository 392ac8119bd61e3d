"""Whether a resident deployment is locked: every route that runs the model (its engine's HTTP contract says
which) refuses a request without the key. Where the engine's own key leaves such a route open, labctl's
authenticating proxy fronts it (templates/auth-proxy/), and the engine listens on loopback behind it."""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass

from labctl.catalog.hosts_file import LOCAL_HOST, HostEntry
from labctl.catalog.http_contracts import HttpContract
from labctl.catalog.profiles import Profile
from labctl.compose.render import ProxySetup
from labctl.errors import BadInput, LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.engine.auth_proxy import RELOAD_TIMEOUT_S, free_loopback_port, reload_keys
from labctl.host.engine.open_routes import probe_open_routes
from labctl.host.engine.probes import status_with_key
from labctl.host.images.transfer import copy_image
from labctl.host.remote.hosts import endpoint_url
from labctl.host.remote.ports import listeners
from labctl.run.records.record import ResidentInfo

# Built by `make auth-proxy-image` (scripts/auth-proxy-image.sh): Debian 12's nginx, never pulled.
AUTH_PROXY_IMAGE = "labctl/auth-proxy:1"
PROXY_SERVICE = "auth-proxy"
# What the proxy writes into its nginx map unquoted (templates/auth-proxy/labctl-auth-proxy checks it again).
PROXY_KEY = re.compile(r"[A-Za-z0-9._~+/=-]+")
OPEN_PATH = re.compile(r"/[A-Za-z0-9._/-]{0,200}")
# Where the engine behind the proxy listens on an SSH host: below Linux's default ephemeral range (32768-60999),
# so an outgoing connection there cannot take it between the choice and the engine's start.
ENGINE_PORTS = (20000, 32000)


@dataclass(frozen=True)
class LockState:
    open_paths: tuple[str, ...]
    open_model_paths: tuple[str, ...]


def needs_proxy(contract: HttpContract | None) -> bool:
    return contract is not None and bool(contract.open_model_routes())


def check_proxied(profile: Profile, keys: list[str]) -> None:
    """What a deployment fronted by the proxy needs, refused before anything is asked or written."""
    what = f"{profile.engine.name}/{profile.name}"
    why = f"{what} leaves routes that run the model open without its key, so labctl fronts it with its proxy"
    check_proxy_keys(keys, "--key-file")
    if profile.network != "host":
        raise BadInput(f"{why}, which runs only with `network: host` (the engine on 127.0.0.1 behind it).")
    if not OPEN_PATH.fullmatch(profile.engine.readiness.probe):
        raise BadInput(
            f"{why}, which leaves only plain paths open (letters, digits and ._/-), not the readiness probe "
            f"{profile.engine.readiness.probe!r}: change readiness.probe in its engine.yaml."
        )


def plan_proxy(readiness_probe: str, host: HostEntry) -> ProxySetup:
    """The proxy's setup: its image must be on the host's daemon (another daemon, a simulated GPU host's or an
    SSH host's, gets this machine's copy over Docker's transport, checked by image id); the engine gets a
    loopback port that is free on that host."""
    there = dk.image_facts(AUTH_PROXY_IMAGE)
    with dk.on_endpoint(endpoint_url(LOCAL_HOST)):
        here = dk.image_facts(AUTH_PROXY_IMAGE)
    if here is None and there is None:
        raise LabctlError(
            f"this engine leaves routes that run the model open without its key, so labctl fronts it with its "
            f"authenticating proxy, but the image {AUTH_PROXY_IMAGE} is not on this host: build it with "
            "`make auth-proxy-image` (offline after the first run)."
        )
    # Another daemon gets this machine's proxy whenever its own copy is missing or another image (an older
    # build): the proxy that checks the keys is the one this labctl was tested with.
    if here is not None and (there is None or there.image_id != here.image_id):
        copy_image(endpoint_url(LOCAL_HOST), host.docker, AUTH_PROXY_IMAGE, lambda _sent, _seconds: None)
        arrived = dk.image_facts(AUTH_PROXY_IMAGE)
        if arrived is None or arrived.image_id != here.image_id:
            raise LabctlError(f"copied {AUTH_PROXY_IMAGE} to {host.name}, but it arrived as another image")
    return ProxySetup(image=AUTH_PROXY_IMAGE, engine_port=engine_port_on(host), open_paths=(readiness_probe,))


def engine_port_on(host: HostEntry) -> int:
    """A port for the engine behind the proxy, on 127.0.0.1 of the host it runs on: a bind test here, and on an
    SSH host a port its kernel does not list as listening (read over SSH, as `up` checks the run's own port)."""
    if not host.is_remote:
        return free_loopback_port()
    found = listeners(host)
    if found is None:
        raise LabctlError(
            f"could not read {host.name}'s listening ports over SSH, so labctl cannot place the engine behind its "
            f"proxy there: check `{' '.join(host.ssh_argv())} cat /proc/net/tcp`, then run up again."
        )
    taken = {port for _, port in found}
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.randrange(*ENGINE_PORTS)
        if port not in taken:
            return port
    raise LabctlError(f"no free port for the engine behind the proxy on {host.name} in {ENGINE_PORTS}")


def check_proxy_keys(keys: list[str], what: str) -> None:
    """Refused before anything is written or started: a key the proxy would refuse to serve with."""
    if any(not PROXY_KEY.fullmatch(k) for k in keys):
        raise BadInput(
            f"{what}: this deployment is fronted by labctl's authenticating proxy, which takes keys made of "
            "letters, digits and ._~+/=- only; give such keys (or let labctl generate them)."
        )


def measure_lock(base: str, contract: HttpContract | None) -> LockState | None:
    """What answers without a key at `base` (None: no contract says which routes to try)."""
    if contract is None:
        return None
    found = probe_open_routes(base, contract.routes)
    return LockState(tuple(r.path for r in found), tuple(r.path for r in found if r.runs_model))


def check_locked(base: str, contract: HttpContract | None, what: str) -> LockState | None:
    state = measure_lock(base, contract)
    if state is not None and state.open_model_paths:
        raise LabctlError(
            f"{what}: {', '.join(state.open_model_paths)} ran the model for a request without the key (measured "
            f"at {base}): the deployment is not locked. It was taken down; see its logs (labctl logs RUN_ID)."
        )
    return state


def describe_open(open_paths: tuple[str, ...] | None, model_paths: tuple[str, ...], readiness: str) -> str:
    """One line for people: which paths answer without a key, measured at the endpoint."""
    if open_paths is None:
        return "open without a key: not measured (no HTTP contract for this engine version lists its routes)"
    if not open_paths:
        return "open without a key: nothing (every route tried refused a request without the key)"
    shown = ", ".join(
        p + (" (runs the model!)" if p in model_paths else " (readiness)" if p == readiness else "") for p in open_paths
    )
    return f"open without a key: {shown}"


def engine_port_exposure(contract: HttpContract | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What the engine's own port behind the proxy serves without a key, and which of that runs the model."""
    if contract is None:
        return (), ()
    return tuple(r.path for r in contract.open_routes()), tuple(r.path for r in contract.open_model_routes())


def describe_engine_port(resident: ResidentInfo, host: str) -> str | None:
    """One line for people: who reaches the engine's own port past the proxy, and what answers there keyless."""
    if not resident.proxy or resident.proxy_engine_port is None:
        return None
    where = "this host" if host == "local" else f"host {host}"
    shown = ", ".join(
        p + (" (runs the model!)" if p in resident.engine_port_open_model else "") for p in resident.engine_port_open
    )
    return (
        f"engine's own port 127.0.0.1:{resident.proxy_engine_port} behind the proxy: every local user of {where} "
        f"reaches it without the proxy; open there without a key: {shown or 'not recorded (no HTTP contract)'}"
    )


def reload_proxy(run_id: str, base: str, refused_key: str | None) -> None:
    """After the key file changed: the proxy re-reads it and reloads nginx; waits until `refused_key` (the
    old key) is refused, since a reload hands new connections to new workers a moment later."""
    proxy = next(
        (c for c in dk.labctl_containers(run_id=run_id, all_states=False) if dk.service_of(c) == PROXY_SERVICE), None
    )
    if proxy is None:
        raise LabctlError(
            f"run {run_id}: its authenticating proxy is not running; take it down (labctl down {run_id})."
        )
    problem = reload_keys(str(proxy.name))
    if problem:
        raise LabctlError(f"run {run_id}: reloading its authenticating proxy failed: {problem}")
    deadline = time.monotonic() + RELOAD_TIMEOUT_S
    while refused_key and status_with_key(base, refused_key) == 200:
        if time.monotonic() > deadline:
            raise LabctlError(f"run {run_id}: its proxy still takes the old key {RELOAD_TIMEOUT_S:g} s after a reload.")
        time.sleep(0.05)
