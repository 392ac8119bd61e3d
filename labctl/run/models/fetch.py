"""labctl fetch (and `up` before anything starts): the profile's model at its pinned revision, downloaded
into the cache folder the engine mounts, so that the engine's cold start never includes a download (it
runs with HF_HUB_OFFLINE=1). A missing or gated model, or too little disk, is refused here."""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from labctl.catalog.hosts_file import HostEntry
from labctl.catalog.memory import find_config
from labctl.catalog.profiles import Profile
from labctl.compose.options import check_cache_dir, default_cache_dir
from labctl.errors import BadInput, LabctlError
from labctl.host.files.disk import check_room
from labctl.host.hub import revisions as hub
from labctl.host.hub import tiny_models
from labctl.host.hub.cache import FetchPlan
from labctl.run.records.acquired import Acquisition, Action, Kind
from labctl.run.records.prep import PrepPart
from labctl.run.records.prep_view import size as human

Say = Callable[[str], None]
PLAIN_EVERY_S = 5.0  # progress lines when no terminal watches (CI logs stay readable)
LIVE_EVERY_S = 0.25
FETCH_TIMEOUT_S = 24 * 3600.0  # a 65 GB model over a slow link; Ctrl-C stops it sooner


@dataclass(frozen=True)
class Fetched:
    repo_id: str
    revision: str
    commit: str
    cache_dir: str
    files: int
    total_bytes: int
    received_bytes: int
    seconds: float
    cached: bool
    endpoint: str

    def part(self) -> PrepPart:
        pinned = self.revision if self.revision == self.commit else f"{self.revision} -> {self.commit}"
        return PrepPart(
            seconds=self.seconds,
            bytes=self.received_bytes,
            cached=self.cached,
            detail=f"{self.repo_id}@{pinned}: {self.files} files, {human(self.total_bytes)} from {self.endpoint}",
        )


def snapshot_acquisition(fetched: Fetched, host: HostEntry, run_id: str | None) -> Acquisition:
    """The ledger line of a fetch: `fetched` when it downloaded anything, else the snapshot was there already."""
    model_dir = Path(fetched.cache_dir) / "hub" / ("models--" + fetched.repo_id.replace("/", "--"))
    return Acquisition(
        Kind.MODEL,
        Action.FOUND if fetched.cached else Action.FETCHED,
        host=host.name,
        folder=str(model_dir / "snapshots" / fetched.commit),
        name=f"{fetched.repo_id}@{fetched.commit}",
        run_id=run_id,
    )


def needs_fetch(profile: Profile) -> bool:
    """Engines that mount a model cache read their model from the Hub; the harness engine has no model files."""
    return profile.engine.model_cache is not None


def check_disk_space(needed: int, folder: Path, what: str) -> None:
    """The same refusal as an image pull's (exit 2, the numbers, LABCTL_DISK_RESERVE_GIB kept free)."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    check_room(needed, str(existing), what)


class Meter:
    """Bytes, rate and ETA: rewritten in place on a terminal, a plain line every few seconds otherwise."""

    def __init__(self, total: int, say: Say, live: Say | None) -> None:
        self.total, self.say, self.live = total, say, live
        self.start = self.last = time.monotonic()

    def __call__(self, received: int) -> None:
        now = time.monotonic()
        if now - self.last < (LIVE_EVERY_S if self.live else PLAIN_EVERY_S) and received < self.total:
            return
        self.last = now
        (self.live or self.say)(self.line(received, now))

    def line(self, received: int, now: float) -> str:
        elapsed = max(now - self.start, 1e-6)
        rate = received / elapsed
        left = max(self.total - received, 0)
        eta = f"{left / rate:.0f} s" if rate > 0 else "?"
        share = f" ({received / self.total:.0%})" if self.total else ""
        return f"fetch: {human(received)} of {human(self.total)}{share}, {human(rate)}/s, ETA {eta}"


def fetch_model(
    profile: Profile, cache_dir: str | None, say: Say, live: Say | None = None, host: HostEntry | None = None
) -> Fetched:
    """Into this machine's cache, or (`host` reached over ssh://) into that host's, where its engine mounts it."""
    if not needs_fetch(profile):
        raise BadInput(
            f"{profile.engine.name} mounts no model cache (model_cache is null in engines/{profile.engine.name}/"
            "engine.yaml): there is nothing to fetch."
        )
    model = profile.model
    remote = host is not None and host.is_remote
    if model.from_loopback_hub and remote:
        raise BadInput(
            f"{profile.name}'s model comes from the lab's loopback Hub (model.hub: loopback), which serves this "
            "machine only: run it here, without --host."
        )
    cache = check_cache_dir(cache_dir, host.name if remote and host is not None else None)
    hub_dir = Path(cache) / "hub"
    with hub_source(profile, say) as base:
        return _fetch(profile, cache, hub_dir, base, time.monotonic(), say, live, host)  # making models is no fetch


@contextlib.contextmanager
def hub_source(profile: Profile, say: Say) -> Iterator[str | None]:
    """The Hub to ask: HF_ENDPOINT or huggingface.co (None), or for `hub: loopback` the lab's tiny models, served
    on 127.0.0.1 by this process for as long as the fetch runs (made first when missing)."""
    if not profile.model.from_loopback_hub:
        yield None
        return
    lab_root = profile.engine.source.path.parents[2]  # <lab>/engines/<engine>/engine.yaml
    repos = tiny_models.ensure_models(lab_root, tiny_models.models_folder(lab_root), say)
    with tiny_models.serving(repos) as base:
        yield base


def _fetch(
    profile: Profile,
    cache: str,
    hub_dir: Path,
    base: str | None,
    start: float,
    say: Say,
    live: Say | None,
    host: HostEntry | None,
) -> Fetched:
    model = profile.model
    where = f"model.id and model.revision in engines/{profile.engine.name}/profiles/{profile.name}.yaml"
    remote = host is not None and host.is_remote
    plan = hub.plan_fetch(model.id, model.revision, None if remote else hub_dir, where, base=base)
    resolved = "" if plan.commit == plan.revision else f" (commit {plan.commit})"
    place = f"{cache} on {host.name}" if remote and host is not None else cache
    if remote and host is not None:
        received, cached = fetch_on_host(plan, cache, host, say, live, resolved)
    elif plan.cached:
        hub.download(plan, hub_dir, lambda _n: None)  # links and refs only: a branch may have moved to this commit
        received, cached = 0, True
    else:
        check_disk_space(plan.missing_bytes, hub_dir, f"fetching {plan.repo_id}@{plan.revision}")
        resume = sum(f.partial for f in plan.files if not f.cached)
        say(starting_line(plan, resolved, place, plan.missing_bytes, resume))
        meter = Meter(plan.missing_bytes, say, live)
        received, cached = hub.download(plan, hub_dir, meter), False
        if live is not None:
            live("")
    seconds = round(time.monotonic() - start, 3)
    if cached:
        say(f"model {plan.repo_id}@{plan.revision}{resolved}: cached in {place}, nothing to download")
    else:
        say(f"fetched {human(received)} in {seconds:.1f} s")
    return Fetched(
        repo_id=plan.repo_id,
        revision=plan.revision,
        commit=plan.commit,
        cache_dir=cache,
        files=len(plan.files),
        total_bytes=plan.total_bytes,
        received_bytes=received,
        seconds=seconds,
        cached=cached,
        endpoint=plan.endpoint,
    )


def starting_line(plan: FetchPlan, resolved: str, place: str, missing: int, resume: int) -> str:
    return (
        f"fetching {plan.repo_id}@{plan.revision}{resolved} from {plan.endpoint} into {place}: "
        f"{human(missing)} to download of {human(plan.total_bytes)}"
        + (f" (resuming: {human(resume)} already here)" if resume else "")
    )


def fetch_on_host(
    plan: FetchPlan, cache: str, host: HostEntry, say: Say, live: Say | None, resolved: str
) -> tuple[int, bool]:
    """The download runs on the host (labctl/host/hub/fetch_job.py in labctl's client image, the cache mounted):
    the engine there mounts that cache, and the bytes go from the Hub to the GPU host directly."""
    from labctl.host.files.disk import reserve_bytes
    from labctl.host.hub.fetch_job import PROTOCOL
    from labctl.host.remote.client_container import client_image, ensure_client_image, run_job
    from labctl.host.remote.hosts import endpoint_url

    image = client_image()
    ensure_client_image(image, host)
    job = {
        "protocol": PROTOCOL,
        "repo_id": plan.repo_id,
        "revision": plan.revision,
        "commit": plan.commit,
        "endpoint": plan.endpoint,
        "files": [{"path": f.path, "size": f.size, "etag": f.etag, "url": f.url} for f in plan.files],
        "token": hub.token(),  # stdin only, never argv
        "reserve_bytes": reserve_bytes(),
    }
    meter: Meter | None = None
    outcome: tuple[int, bool] | None = None
    problem: dict[str, object] = {}
    name = f"labctl-fetch-{secrets.token_hex(6)}"
    lines = run_job(
        endpoint_url(host),
        image,
        name,
        "labctl.host.hub.fetch_job",
        json.dumps(job).encode(),
        FETCH_TIMEOUT_S,
        label="labctl.fetch_client=true",
        mounts=(f"{cache}:/cache",),
        user="0:0",  # as Docker itself, which creates a missing cache folder there as root
    )
    try:
        for line in lines:
            event = _event(line)
            kind = event.get("event")
            if kind == "plan" and not event.get("cached"):
                missing = _count(event.get("missing"))
                say(starting_line(plan, resolved, f"{cache} on {host.name}", missing, 0))
                meter = Meter(missing, say, live)
            elif kind == "progress" and meter is not None:
                meter(_count(event.get("received")))
            elif kind == "done":
                outcome = (_count(event.get("received")), bool(event.get("cached")))
            elif kind == "error":
                problem = event
    except LabctlError:
        if not problem:
            raise
    if live is not None:
        live("")
    if problem.get("kind") == "disk":
        need, free, reserve = (_count(problem.get(k)) for k in ("need", "free", "reserve"))
        kept = f" + {human(reserve)} kept free (LABCTL_DISK_RESERVE_GIB)" if reserve else ""
        raise BadInput(
            f"not enough disk space on {host.name} for fetching {plan.repo_id}@{plan.revision}: need {human(need)}"
            f"{kept}, {human(free)} free at {cache} there. Free some and try again. Nothing was started."
        )
    if problem:
        raise LabctlError(f"the fetch on {host.name} failed: {str(problem.get('message', 'no reason given'))[:500]}")
    if outcome is None:
        raise LabctlError(f"the fetch on {host.name} ended without saying it finished")
    return outcome


def _event(line: str) -> dict[str, object]:
    try:
        event = json.loads(line)
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 60:
        raise LabctlError(f"the fetch client sent {value!r} where a byte count belongs")
    return value


def fetch_before_start(
    profile: Profile, cache_dir: str | None, fetch: bool, remote_host: HostEntry | None, say: Say, live: Say | None
) -> Fetched | None:
    """`up`'s step: fetch unless --no-fetch; with --no-fetch, warn when the cache lacks the model."""
    if not needs_fetch(profile):
        return None
    model = profile.model
    if not fetch:
        say("--no-fetch: the engine starts from what the model cache holds; it cannot download (offline)")
        cache = Path(cache_dir or default_cache_dir())
        with contextlib.suppress(ValueError):
            if remote_host is None and find_config(cache, model.id, model.revision) is None:
                say(
                    f"warning: {model.id}@{model.revision} is not in {cache}: an engine that loads weights "
                    f"will fail to start offline. Fetch it: labctl fetch {profile.engine.name} --profile {profile.name}"
                )
        return None
    return fetch_model(profile, cache_dir, say, live, remote_host)
