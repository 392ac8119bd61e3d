"""The run record: one typed value for what ran, built in one place (`new_record`), read and written
as JSON by `to_json` / `from_json`. Records written by earlier labctl versions stay readable: unknown
keys are kept aside in `extra`, missing ones take their defaults."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from labctl.catalog.engine_settings import Effective
from labctl.compose.labels import RunLabels
from labctl.host.gpus.inventory import Gpu
from labctl.host.remote.forward import Forward
from labctl.run.records.prep import PrepPart
from labctl.run.records.typed import check_depth, check_version, expect, from_json

SCHEMA_VERSION = 1
READABLE_SCHEMAS = (1,)

JsonObject = dict[str, Any]  # data on its way in or out, never the model
SLURM_QUEUED = ("SUBMITTED", "PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED")


@dataclass(frozen=True)
class ImageInfo:
    reference: str | None = None
    digest: str | None = None
    pinned: bool = False
    repo_digests: tuple[str, ...] = ()
    image_id: str = ""
    user: str = ""
    pulled: bool = False
    copied: str | None = None  # copied from the controller (save | load): how it was verified; run by image_id
    built: str | None = None  # built on this host by labctl (the harness image): from what, and whether pushed

    @property
    def runnable(self) -> str:
        """What Docker on the run's host is given: a copied image has no repo digest there, only its id."""
        return self.image_id if self.copied else str(self.reference)


@dataclass(frozen=True)
class GpuSet:
    ids: tuple[str, ...] = ()
    count: int = 0
    devices: tuple[Gpu, ...] = ()
    note: str | None = None
    simulated: bool = False  # the test lab's simulated GPUs: the run is labelled harness-check


@dataclass(frozen=True)
class Endpoint:
    base_url: str = ""
    host: str | None = None
    port: int | None = None


@dataclass(frozen=True)
class EngineBuild:
    skipped: bool = False
    engine_dir: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class Timings:
    image_pull_s: float | None = None
    engine_build_s: EngineBuild | None = None
    compose_up_s: float | None = None
    port_open_s: float | None = None
    ready_s: float | None = None
    first_completion_s: float | None = None
    cold_start_s: float | None = None
    total_s: float | None = None
    # labctl's own seconds in this up, by part (checks, claims, render, ...; `after_ready`: from the engine's
    # first completion to the end of up), beside the engine's; None in records of an older labctl.
    labctl_s: dict[str, float] | None = None
    poll_gap_s: float | None = None  # the readiness probe's interval when the engine became ready: the most it lagged


@dataclass(frozen=True)
class ComposeInfo:
    file: str = "compose.yaml"
    project: str = ""
    command: tuple[str, ...] = ()
    render_options: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ContainerInfo:
    name: str = ""
    id: str = ""
    command_line: tuple[str, ...] = ()
    env_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResidentInfo:
    restart_policy: str = "unless-stopped"
    bind: str = ""
    auth: str = "none"
    keys: int = 0
    key_fingerprints: tuple[str, ...] = ()
    allow_no_auth: bool = False
    warnings: tuple[str, ...] = ()
    rotated_at: str | None = None
    watcher: str = ""  # the restart watcher's container (labctl-watch-<run_id>), "" when none could run
    watcher_note: str | None = None  # why none runs
    # A remote host: the named volume there holding the keys (labctl-keys-<run_id>); not "key_…", which records redact.
    auth_volume: str = ""
    # How its watcher probes (the engine's readiness when it started): `status` starts a missing one alike.
    watch_interval_s: float | None = None
    hung_after_failures: int | None = None
    # A key rotation under way (written before the engine restarts): who, since when, which process, and
    # the new keys' fingerprints. The next command finishes or undoes one whose process is gone.
    rotating_since: str | None = None
    rotating_process: str | None = None
    rotating_by: str | None = None
    rotating_to: tuple[str, ...] = ()
    # An engine whose own key leaves routes that run the model open is fronted by labctl's authenticating
    # proxy (this image), the engine bound to 127.0.0.1:proxy_engine_port behind it.
    proxy: str = ""
    proxy_engine_port: int | None = None
    # What answered without a key at the endpoint, measured after up and after each rotation.
    open_paths: tuple[str, ...] | None = None  # None: not measured (no HTTP contract for the engine version)
    open_model_paths: tuple[str, ...] = ()
    # Behind the proxy, the engine's own port (127.0.0.1:proxy_engine_port on its host) is reachable by every
    # local user of that host, past the proxy: what answers there without a key, per the engine's HTTP contract.
    engine_port_open: tuple[str, ...] = ()
    engine_port_open_model: tuple[str, ...] = ()


@dataclass(frozen=True)
class Observed:
    """What `labctl status` last saw of a resident engine, so that a change becomes an event."""

    restarts: int = 0
    health: str = "healthy"
    at: str | None = None
    at_monotonic: float | None = None


@dataclass(frozen=True)
class Reproduction:
    source: str = ""
    original_run_id: str | None = None
    original_host: str | None = None  # the controller machine that started the original
    original_host_entry: str | None = None  # the labctl host (and Docker daemon) it ran on
    original_docker_host_id: str | None = None
    compose_sha256_matches: bool = False
    forced: bool = False


@dataclass(frozen=True)
class Fit:
    """The memory-fit estimate `up` made from the chosen GPUs' free memory (arithmetic, nothing measured)."""

    fits: bool = True
    allowed_unfit: bool = False
    gpu_memory_gib: float = 0.0  # per GPU, free when checked (unified memory: the host's available memory)
    unified_memory: bool = False
    weights_gib: float = 0.0
    kv_needed_gib: float = 0.0
    kv_available_gib: float = 0.0


@dataclass(frozen=True)
class EngineSetup:
    version: str | None = None  # the engine release (or Atlas source commit) the profile pins
    contract: str | None = None  # the CLI contract file that checked the command line
    allow_uncontracted: bool = False
    memory_setting: str | None = None  # the engine's own option, e.g. --mem-fraction-static
    memory_value: float | None = None
    memory_meaning: str | None = None  # four engines, four meanings of one number
    thinking: str = "off"
    revision_pinned: bool = True
    driver_cuda: str | None = None  # the driver's CUDA version when up checked it
    memory_fit: Fit | None = None  # False: the engine cannot name a revision and served the hub's main
    model_commit: str | None = None  # the commit the model revision resolved to when labctl fetched it


@dataclass(frozen=True)
class SlurmJob:
    """A run on a Slurm cluster: the job, where Slurm put it, and how it ended (sacct, else scontrol, else
    unknown). Slurm chose the node and the GPUs; labctl read them back."""

    cluster: str = ""
    job_id: str = ""
    node: str = ""
    gpu_indexes: tuple[int, ...] = ()
    gpu_uuids: tuple[str, ...] = ()
    gpus_requested: int = 0
    time_limit_min: int = 0
    cpus: int | None = None
    mem_mib: int | None = None
    submitted_at: str = ""
    state: str = "SUBMITTED"
    reason: str = ""
    exit_code: str = ""
    state_source: str = ""  # squeue, sacct, scontrol, or unknown
    queue_wait_s: float | None = None  # also the prep part queue_wait: never in cold start
    resident_keys: int = 0
    events: tuple[str, ...] = ()

    @property
    def ended(self) -> bool:
        return self.state not in (*SLURM_QUEUED, "RUNNING", "COMPLETING")


@dataclass(frozen=True)
class Record:
    run_id: str
    status: str  # starting | running | stopping | failed | aborted | stopped | external
    engine: str
    profile: str
    served_model_name: str
    schema_version: int = SCHEMA_VERSION
    reason: str | None = None
    user: str = ""
    owner: str = ""
    host: str = ""  # the controller's machine name
    host_entry: str = "local"  # which of labctl's hosts ran it (labctl hosts)
    docker_endpoint: str = "local"
    docker_host_id: str = ""  # `docker info` ID of the daemon that ran it
    docker_host_name: str = ""  # the machine name that daemon reports
    forward: Forward | None = None  # a remote run: the SSH forward its base URL goes through
    created_at: str = ""
    labctl_version: str = ""
    environment_label: str = ""
    profile_sha256: str | None = None
    resolved_profile: JsonObject | None = None  # the validated profile spec, as data
    allow_unsupported: bool = False
    support_problem: str | None = None
    probe: str = "/health"
    probe_timeout_s: float = 2.0
    metrics_path: str | None = None
    image: ImageInfo = ImageInfo()
    compose: ComposeInfo | None = None
    env_names: tuple[str, ...] = ()
    gpus: GpuSet = GpuSet()
    endpoint: Endpoint = Endpoint()
    timings: Timings = Timings()
    replaced: tuple[str, ...] = ()
    reproduced_from: str | None = None
    record_path: str = ""
    run_labels: RunLabels | None = None  # the run part only (run id, owner, port, ...)
    resident: ResidentInfo | None = None
    engine_setup: EngineSetup | None = None
    setup: dict[str, str] = field(default_factory=dict)  # compose_sha256: the setup's identity
    ready_at: str | None = None
    container: ContainerInfo | None = None
    engine_version: Any = None  # the engine's own /version answer, as it gave it
    models: Any = None  # the engine's own /v1/models answer
    stopped_at: str | None = None
    stopped_by: str | None = None
    stop_reason: str | None = None
    replaced_by: str | None = None
    stop_forced: bool = False
    observed: Observed | None = None
    reproduction: Reproduction | None = None
    up_process: str | None = None  # the `labctl up` that owns a starting record (pid:start time)
    down_process: str | None = None  # the `labctl down` that owns a stopping record (pid:start time)
    prep: dict[str, PrepPart] = field(default_factory=dict)
    # gpu | simulated (a simulated GPU host, or the harness engine) | cpu | unknown (an endpoint labctl did not
    # start); None in records written before it: `accelerator_kind` derives it
    accelerator: str | None = None
    slurm: SlurmJob | None = None  # a run on a Slurm cluster
    # What the engine computed with (KV-cache dtype, prefix caching, ...), each with whence: the engine's own
    # report, the command, or its folder's default. None in records written before it.
    settings: dict[str, Effective] | None = None
    extra: JsonObject = field(default_factory=dict)  # keys a newer labctl wrote; kept, never interpreted

    def to_json(self) -> JsonObject:
        data = _to_json(self)
        assert isinstance(data, dict)
        data["prep"] = {name: part.to_json() for name, part in self.prep.items()}
        if data["settings"] is None:  # not known (a record of an older labctl reads and writes back unchanged)
            del data["settings"]
        for newer in ("labctl_s", "poll_gap_s"):  # likewise: an up of an older labctl did not measure them
            if data["timings"].get(newer) is None:
                data["timings"].pop(newer, None)
        return {**data.pop("extra"), **data}

    @classmethod
    def from_json(cls, data: JsonObject) -> Record:
        """A record from its JSON; a wrong shape raises ShapeError (naming the field), a newer schema
        FutureSchema: both are ValueError."""
        check_depth(data)
        check_version(expect(dict, data), READABLE_SCHEMAS, SCHEMA_VERSION)
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        record: Record = from_json(cls, {k: v for k, v in data.items() if k in known - {"prep"}})
        prep = {
            str(name): from_json(PrepPart, part, f"prep.{name}")
            for name, part in expect(dict, data.get("prep") or {}, "prep").items()
        }
        return dataclasses.replace(record, prep=prep, extra={k: v for k, v in data.items() if k not in known})

    def changed(self, **changes: Any) -> Record:
        return dataclasses.replace(self, **changes)

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

    @property
    def accelerator_kind(self) -> str:
        """What the engine ran on, for the same-rules gate: the recorded field, else derived as `up` sets it."""
        if self.accelerator:
            return self.accelerator
        if self.status in ("external", "unknown"):
            return "unknown"
        if self.gpus.simulated or self.gpus.note == "no GPU":
            return "simulated"
        return "gpu"

    @property
    def is_resident(self) -> bool:
        return self.resident is not None

    def summary(self) -> JsonObject:
        """The stable machine-readable face of a run (`up --json`, `status --json`)."""
        return {
            "run_id": self.run_id,
            "engine": self.engine,
            "profile": self.profile,
            "status": self.status,
            "base_url": self.endpoint.base_url,
            "model": self.served_model_name,
            "gpus": list(self.gpus.ids),
            "health": "healthy" if self.status == "running" else self.status,
            "owner": self.owner,
            "environment_label": self.environment_label,
            "record": self.record_path,
            "host": self.host_entry,
            "gpu_devices": [{"index": g.index, "name": g.name, "uuid": g.uuid} for g in self.gpus.devices],
            "simulated_gpu": self.gpus.simulated,
            "accelerator": self.accelerator_kind,
        }


def _to_json(value: Any) -> Any:
    if isinstance(value, RunLabels):
        return value.run_labels()  # what labctl up added; the setup's own labels are in the compose file
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    return value


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_record(
    run_id: str,
    engine: str,
    profile: str,
    served_model_name: str,
    endpoint: Endpoint,
    owner: str | None,
    environment_label: str,
    status: str = "starting",
    record_path: str = "",
    **facts: Any,
) -> Record:
    """The one place a record is born, for a labctl run and for an external endpoint alike: who, where,
    when and which labctl are filled in here, from the operating system."""
    from labctl import __version__
    from labctl.host.identity import current_user, host_name

    user = current_user()
    return Record(
        run_id=run_id,
        status=status,
        engine=engine,
        profile=profile,
        served_model_name=served_model_name,
        user=user,
        owner=owner or user,
        host=host_name(),
        created_at=facts.pop("created_at", None) or now(),
        labctl_version=__version__,
        environment_label=environment_label,
        endpoint=endpoint,
        record_path=record_path,
        **facts,
    )
