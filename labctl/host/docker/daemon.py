"""Docker at the edge, the one module that imports python-on-whales: every ordinary call to the Docker Engine and
Compose goes through it here, and every failure becomes a LabctlError that names the command and Docker's own words.
The docker CLI itself is run (argv from `cli_argv`/`cli_argv_for`, each place saying why) only where a call must feed
a container's stdin, stream between two daemons, or be killed together with the ssh it started; engine_api.py asks
the Engine API's socket for the two answers the CLI does not give."""

from __future__ import annotations

import datetime as dt
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_on_whales import Container, DockerClient, client_config, docker
from python_on_whales.exceptions import DockerException, NoSuchContainer, NoSuchImage

__all__ = ["Container", "DockerException", "NoSuchContainer"]  # for the edge modules beside this one

from labctl.errors import LabctlError

RUN_LABEL = "labctl.run_id"
# python-on-whales re-runs `docker inspect` on every attribute read older than 10 ms: ~50 ms each.
# labctl reads labels, names and commands (which do not change) from one inspection, and asks for a
# fresh one explicitly where state matters (container_state).
client_config.CACHE_VALIDITY_PERIOD = 3600.0

# A process drives one host (DOCKER_HOST, set by hosts.activate); `status` asks every host at once, each
# in its own thread, so a thread may name its own endpoint.
_thread = threading.local()


def client() -> DockerClient:
    chosen: DockerClient | None = getattr(_thread, "client", None)
    return chosen or docker


@contextmanager
def on_endpoint(endpoint: str) -> Iterator[None]:
    """This thread's Docker calls go to `endpoint` (a URL `docker -H` takes)."""
    previous = getattr(_thread, "client", None)
    _thread.client = DockerClient(host=endpoint)
    try:
        yield
    finally:
        _thread.client = previous


@contextmanager
def docker_errors(what: str) -> Iterator[None]:
    try:
        yield
    except DockerException as exc:
        detail = (exc.stderr or exc.stdout or str(exc)).strip().splitlines()
        tail = " ".join(detail[-3:]) if detail else "no output"
        raise LabctlError(f"{what} failed: {tail} (command: {' '.join(exc.docker_command)})") from None


def check_docker() -> str:
    """The daemon's version, or a clear error when no Docker Engine answers."""
    try:
        return str(client().version().server.version)  # type: ignore[union-attr]
    except DockerException as exc:
        reason = (exc.stderr or str(exc)).strip().splitlines()[-1:] or ["no answer"]
        raise LabctlError(
            f"Docker Engine does not answer ({reason[0]}). Start it (e.g. `make docker-lab`, or `systemctl start docker`)."
        ) from None
    except FileNotFoundError:
        raise LabctlError(
            "the docker CLI is not installed. Run `make docker-lab` (Debian) or install Docker Engine."
        ) from None


def server_version(endpoint: str, timeout: float) -> str | None:
    """The Docker Engine version at an endpoint (local: the default), or None when it does not answer
    within `timeout` seconds (one dead host must not hang a listing)."""
    import os
    import signal
    import subprocess

    argv = [*cli_argv_for(endpoint), "version", "-f", "{{.Server.Version}}"]
    # Its own process group: on a timeout the docker CLI *and* the ssh it started go, or their open pipe
    # would keep us waiting as long as ssh does.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    return out.strip() or None if proc.returncode == 0 else None


def check_compose() -> str:
    try:
        version = str(client().compose.version())
    except DockerException:
        raise LabctlError("Docker Compose v2 (`docker compose`) is not installed. Run `make docker-lab`.") from None
    return version.strip()


def runtimes() -> list[str]:
    with docker_errors("docker info"):
        info = client().info()
    return sorted((info.runtimes or {}).keys())


_ARCHITECTURES = {
    "x86_64": ("amd64", None),
    "aarch64": ("arm64", None),
    "armv7l": ("arm", "v7"),
    "ppc64le": ("ppc64le", None),
}


@dataclass(frozen=True)
class DaemonFacts:
    """What the daemon says about itself that pulling depends on."""

    os: str
    architecture: str  # Go's name, as image indexes use it (amd64, arm64)
    variant: str | None
    root_dir: str
    insecure_registries: frozenset[str]
    insecure_cidrs: tuple[str, ...]
    id: str = ""  # the daemon's own ID (`docker info`): which host ran a run, whatever its name
    name: str = ""  # the machine name the daemon reports


def daemon_facts() -> DaemonFacts:
    with docker_errors("docker info"):
        info = client().info()
    arch, variant = _ARCHITECTURES.get(str(info.architecture), (str(info.architecture), None))
    config: dict[str, Any] = dict(info.registry_config or {})
    indexes = config.get("IndexConfigs") or {}
    return DaemonFacts(
        os=str(info.os_type or "linux"),
        architecture=arch,
        variant=variant,
        root_dir=str(info.docker_root_dir or "/var/lib/docker"),
        insecure_registries=frozenset(
            n for n, c in indexes.items() if isinstance(c, dict) and c.get("Secure") is False
        ),
        insecure_cidrs=tuple(str(c) for c in config.get("InsecureRegistryCIDRs") or ()),
        id=str(info.id or ""),
        name=str(info.name or ""),
    )


def gpu_request_problem(image: str, device_ids: list[str]) -> str | None:
    """Start (and remove) one container of `image` that asks for these GPUs; None when it starts."""
    try:
        client().run(
            image,
            ["true"],
            entrypoint="true",
            remove=True,
            gpus=f'"device={",".join(device_ids)}"',
            networks=["none"],
            name=None,
        )
    except DockerException as exc:
        lines = (exc.stderr or str(exc)).strip().splitlines()
        return lines[-1] if lines else "no output"
    return None


def _endpoint() -> str | None:
    chosen: DockerClient | None = getattr(_thread, "client", None)
    return str(chosen.client_config.host) if chosen and chosen.client_config.host else None


def cli_argv() -> list[str]:
    """`docker` (with `-H` when this thread names its own endpoint): for the few calls python-on-whales cannot
    make, such as feeding a container's stdin."""
    return cli_argv_for(_endpoint())


def cli_argv_for(endpoint: str | None) -> list[str]:
    """`docker -H ENDPOINT`, or plain `docker` for the local engine (None or "local")."""
    return ["docker", *(["-H", endpoint] if endpoint and endpoint != "local" else [])]


def compose_client(compose_file: Path, project: str) -> DockerClient:
    return DockerClient(compose_files=[compose_file], compose_project_name=project, host=_endpoint())


def compose_down(project: str) -> None:
    with docker_errors(f"docker compose down ({project})"):
        DockerClient(compose_project_name=project, host=_endpoint()).compose.down(
            timeout=10, quiet=True, remove_orphans=True
        )


def compose_argv(compose_file: Path, project: str, *args: str) -> list[str]:
    """The plain command equivalent to what labctl runs through python-on-whales (shown and recorded, not run)."""
    return [*cli_argv_for(None), "compose", "--file", str(compose_file), "--project-name", project, *args]


@dataclass(frozen=True)
class ImageFacts:
    reference: str
    image_id: str
    repo_digests: list[str]
    user: str = ""


def image_facts(reference: str) -> ImageFacts | None:
    try:
        image = client().image.inspect(reference)
    except NoSuchImage:
        return None
    except DockerException as exc:
        if "No such image" in (exc.stderr or ""):
            return None
        raise
    return ImageFacts(
        reference=reference,
        image_id=str(image.id),
        repo_digests=list(image.repo_digests or []),
        user=str(image.config.user or "") if image.config else "",
    )


def pull(reference: str, quiet: bool) -> ImageFacts:
    with docker_errors(f"pulling {reference}"):
        client().image.pull(reference, quiet=quiet)
    facts = image_facts(reference)
    if facts is None:
        raise LabctlError(f"pulled {reference} but Docker does not list it")
    return facts


@dataclass(frozen=True)
class LocalImage:
    id: str
    references: tuple[str, ...]  # its tags and repo digests
    size: int


def local_images(ids: set[str]) -> list[LocalImage]:
    """Those of these image ids the daemon still has."""
    found = []
    for image_id in sorted(ids):
        try:
            image = client().image.inspect(image_id)
        except (NoSuchImage, DockerException):
            continue
        refs = tuple(str(r) for r in [*(image.repo_tags or []), *(image.repo_digests or [])])
        found.append(LocalImage(str(image.id), refs, int(image.size or 0)))
    return found


def image_ids() -> set[str]:
    """The id of every image the daemon has, intermediate ones included."""
    argv = [*cli_argv(), "image", "ls", "--all", "--quiet", "--no-trunc"]
    listed = subprocess.run(argv, capture_output=True, text=True)
    if listed.returncode != 0:
        raise LabctlError(f"listing images failed: {listed.stderr.strip()[-300:]} (command: {' '.join(argv)})")
    return set(listed.stdout.split())


def image_parents() -> dict[str, str]:
    """Every image the daemon has (intermediate ones too), by id, with the id of the image it was built on
    ('' for none): an image another one is built on is that image's base, whoever named it."""
    argv, ids = cli_argv(), sorted(image_ids())
    parents: dict[str, str] = {}
    for start in range(0, len(ids), 200):  # a bounded command line per call
        chunk = ids[start : start + 200]
        inspected = subprocess.run(
            [*argv, "image", "inspect", "--format", "{{.Id}} {{.Parent}}", *chunk], capture_output=True, text=True
        )
        for line in inspected.stdout.splitlines():  # an image removed meanwhile is simply not listed
            image_id, _, parent = line.partition(" ")
            parents[image_id] = parent.strip()
    return parents


def containers_and_images() -> list[tuple[str, dict[str, str]]]:
    """(image id, labels) of every container on the host, in any state."""
    from labctl.host.docker import engine_api

    try:
        listed = engine_api.containers()
    except OSError:
        listed = None
    if listed is not None:
        return listed
    with docker_errors("listing containers"):
        return [(str(c.image), labels_of(c)) for c in client().container.list(all=True)]


def remove_image_reference(reference: str) -> str | None:
    """Untag one reference (no force: Docker refuses while a container uses the image); None when done."""
    try:
        client().image.remove(reference, force=False)
    except DockerException as exc:
        lines = (exc.stderr or str(exc)).strip().splitlines()
        return lines[-1] if lines else "refused"
    return None


def labctl_containers(all_states: bool = True, run_id: str | None = None) -> list[Container]:
    label = f"{RUN_LABEL}={run_id}" if run_id else RUN_LABEL
    with docker_errors("listing labctl containers"):
        listed = list(client().container.list(all=all_states, filters={"label": label}))
    return [c for c in listed if _still_there(c)]


def _still_there(container: Container) -> bool:
    """Inspect it now (the inspection is kept): on a shared host a container listed a moment ago may be
    gone already, and reading its labels later would fail the whole command."""
    try:
        container.config  # noqa: B018 - the attribute read is the inspection
    except NoSuchContainer:
        return False
    except DockerException as exc:
        if "No such container" in (exc.stderr or ""):
            return False
        raise
    return True


def labels_of(container: Container) -> dict[str, str]:
    return dict(container.config.labels or {})


def service_of(container: Container) -> str:
    return labels_of(container).get("com.docker.compose.service", "")


def refresh(container: Container) -> None:
    container.reload()  # type: ignore[no-untyped-call]


def follow_logs(container: Container, tail: int | None = None, since: dt.datetime | None = None) -> Iterator[bytes]:
    stream: Any = client().container.logs(container, follow=True, stream=True, tail=tail, since=since)
    for _source, line in stream:
        yield line if isinstance(line, bytes) else str(line).encode()


def restart(container: Container) -> None:
    client().container.restart(container, time=10)


def container_state(container: Container) -> dict[str, Any]:
    try:
        refresh(container)
    except NoSuchContainer:
        return {"status": "removed", "exit_code": None, "restarts": 0, "running": False}
    state = container.state
    return {
        "status": str(state.status),
        "exit_code": state.exit_code,
        "running": bool(state.running),
        "restarts": int(container.restart_count or 0),
        "started_at": state.started_at.isoformat() if state.started_at else None,
        "finished_at": state.finished_at.isoformat() if state.finished_at else None,
        "oom_killed": bool(state.oom_killed),
        "error": str(state.error or ""),
    }


def command_line(container: Container) -> list[str]:
    """Entrypoint + arguments as Docker reports them after start."""
    return [str(container.path), *[str(a) for a in (container.args or [])]]


def read_logs(container: Container, lines: int) -> str | None:
    """The container's last log lines; None when Docker could not give them (not: it printed nothing)."""
    try:
        return str(client().container.logs(container, tail=lines))
    except DockerException:
        return None


def logs_part(container: Container, lines: int, since: dt.datetime | None) -> str:
    """The last `lines` lines written since `since` (None: from the start)."""
    with docker_errors("reading the engine's logs"):
        return str(client().container.logs(container, tail=lines, since=since))


def logs_tail(container: Container, lines: int = 30) -> str:
    return read_logs(container, lines) or ""


def last_log_line(container: Container) -> str:
    text = logs_tail(container, 1).strip()
    return text.splitlines()[-1] if text else ""


WATCH_LABEL = "labctl.watch_of"


def local_socket() -> Path | None:
    """The Docker Engine's unix socket when this host's daemon is reached through one (a watcher
    container mounts it); None for ssh:// and tcp:// endpoints."""
    import os

    endpoint = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not endpoint.startswith("unix://"):
        return None
    path = Path(endpoint.removeprefix("unix://"))
    return path if path.is_socket() else None


@dataclass(frozen=True)
class WatcherSpec:
    name: str
    image: str
    run_id: str
    home: str
    run_dir: str  # the run's folder on this machine, or a volume holding the watcher's files on a remote host
    socket: str  # the daemon's socket as the host that runs the watcher sees it
    user: str
    command: list[str]


def start_watcher(spec: WatcherSpec) -> None:
    with docker_errors(f"starting the restart watcher {spec.name}"):
        client().run(
            spec.image,
            spec.command,
            name=spec.name,
            detach=True,
            restart="unless-stopped",
            user=spec.user,
            networks=["host"],  # it probes the engine where labctl does: on this host's loopback
            volumes=[(spec.socket, "/var/run/docker.sock"), (spec.run_dir, "/labctl-run")],
            labels={WATCH_LABEL: spec.run_id, "labctl.home": spec.home},
            log_driver="json-file",
            log_options=["max-size=1m", "max-file=2"],
            read_only=True,
            cap_drop=["ALL"],
            security_options=["no-new-privileges"],
            memory="64m",
            pids_limit=32,
            entrypoint="python3",
        )


def watchers(run_id: str | None = None) -> list[Container]:
    label = f"{WATCH_LABEL}={run_id}" if run_id else WATCH_LABEL
    with docker_errors("listing labctl watchers"):
        return list(client().container.list(all=True, filters=[("label", label)]))


def start_container(container: Container) -> None:
    with docker_errors(f"starting {container.name}"):
        client().container.start(container)


def remove_local(name: str) -> None:
    """Remove a container of this machine's engine if it is there (whatever endpoint this thread names)."""
    with suppress(DockerException):
        docker.container.remove(name, force=True)


def remove_containers(containers: list[Container]) -> None:
    """Remove containers by id; one that is already gone (it removed itself meanwhile) is what removing wanted."""
    if containers:
        ids = [c.id for c in containers]  # a name would ask the daemon again, and a vanished container has none
        with docker_errors("removing " + ", ".join(_shown_name(c) for c in containers)), suppress(NoSuchContainer):
            client().container.remove(ids, force=True)


def _shown_name(container: Container) -> str:
    try:
        return str(container.name)
    except DockerException:
        return container.id[:12]


def events_between(label: str, since: str, until: str) -> list[dict[str, Any]]:
    """Docker's own events for containers carrying `label`, as the Engine API reports them (the daemon
    keeps its recent events in memory; older ones, and those before a daemon restart, are gone)."""
    import json
    import subprocess

    # The CLI, bounded by a timeout: python-on-whales' event stream has no deadline of its own.
    argv = [*cli_argv_for(None), "events", "--since", since, "--until", until, "--filter", f"label={label}"]
    argv += ["--filter", "type=container", "--format", "{{json .}}"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return []
    events = []
    for line in proc.stdout.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            events.append(value)
    return events


def remove_volume(name: str, what: str) -> bool:
    """Remove a named volume; False when there was none. Containers using it must be gone first."""
    try:
        client().volume.remove(name)
    except DockerException as exc:
        text = exc.stderr or str(exc)
        if "no such volume" in text.lower():
            return False
        raise LabctlError(f"removing the {what} {name} failed: {text.strip().splitlines()[-1:]}") from None
    return True


def labelled_containers(endpoint: str, label: str) -> list[Container]:
    """Every container (any state) carrying `label` (NAME or NAME=VALUE) on the daemon at `endpoint`."""
    with on_endpoint(endpoint), docker_errors(f"listing containers on {endpoint}"):
        return list(client().container.list(all=True, filters=[("label", label)]))


def remove_container_on(endpoint: str, container_id: str) -> None:
    with on_endpoint(endpoint), docker_errors(f"removing container {container_id[:12]} on {endpoint}"):
        client().container.remove(container_id, force=True)


def labelled_volumes(endpoint: str, label: str) -> list[str]:
    with on_endpoint(endpoint), docker_errors(f"listing volumes on {endpoint}"):
        return [str(v.name) for v in client().volume.list(filters={"label": label})]
