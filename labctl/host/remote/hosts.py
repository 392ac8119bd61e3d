"""The hosts labctl drives, at the edge: `labctl hosts add|remove` writing the user's hosts file, and pointing this
process's Docker and nvidia-smi calls at a chosen host (the file itself is read in catalog/hosts_file.py)."""

from __future__ import annotations

import os
from pathlib import Path

from labctl.catalog.fields import check_mapping
from labctl.catalog.hosts_file import (
    ARGV_WORD,
    FILE_FIELDS,
    HOST_NAME,
    LOCAL,
    SOCKET_PATH,
    HostEntry,
    is_endpoint,
    user_hosts_file,
)
from labctl.catalog.sourcefile import load_yaml_mapping
from labctl.errors import BadInput


def _read_user_file() -> tuple[Path, dict[str, dict[str, object]], str | None]:
    path = user_hosts_file()
    if not path.is_file():
        return path, {}, None
    src = load_yaml_mapping(path, display=str(path))
    spec = check_mapping(src, (), src.data, FILE_FIELDS)
    return path, dict(spec["hosts"] or {}), spec["default"]


def _write_user_file(path: Path, entries: dict[str, dict[str, object]], default: str | None) -> None:
    import yaml

    from labctl.host.files.atomic import write_atomically

    doc: dict[str, object] = {"hosts": entries}
    if default:
        doc["default"] = default
    header = "# labctl hosts (labctl hosts add|remove). No secrets here: SSH keys stay in your SSH setup.\n"
    write_atomically(path, header + yaml.safe_dump(doc, sort_keys=True), mode=0o644)


def add_host(name: str, docker: str, nvidia_smi: list[str], socket: str | None = None) -> Path:
    if not HOST_NAME.match(name) or name == LOCAL:
        raise BadInput(f"host name {name!r} is not allowed: lower-case letters, digits, '.', '_', '-' (not 'local').")
    if not is_endpoint(docker):
        raise BadInput(
            f"{docker!r} is not a Docker endpoint: use local, unix:///path/docker.sock or ssh://user@host[:port]."
        )
    if not nvidia_smi or not all(ARGV_WORD.match(w) for w in nvidia_smi):
        raise BadInput(f"--nvidia-smi {' '.join(nvidia_smi)!r}: plain words only (a path and options).")
    if socket is not None and not SOCKET_PATH.match(socket):
        raise BadInput(f"--socket {socket!r}: give the socket's absolute path on that host, e.g. /var/run/docker.sock.")
    path, entries, default = _read_user_file()
    entries[name] = {"docker": docker, "nvidia_smi": nvidia_smi, **({"socket": socket} if socket else {})}
    _write_user_file(path, entries, default)
    return path


def remove_host(name: str) -> Path:
    path, entries, default = _read_user_file()
    if name not in entries:
        raise BadInput(f"no host {name!r} in {path}.")
    del entries[name]
    _write_user_file(path, entries, None if default == name else default)
    return path


# The user's own DOCKER_HOST, before `activate` points this process at a chosen host: what `local` means.
_USER_DOCKER_HOST = os.environ.get("DOCKER_HOST")


def endpoint_url(entry: HostEntry) -> str:
    """The endpoint `docker -H` takes for this host (local: the user's DOCKER_HOST, else Docker's socket)."""
    if entry.docker != LOCAL:
        return entry.docker
    return _USER_DOCKER_HOST or "unix:///var/run/docker.sock"


def activate(entry: HostEntry) -> None:
    """Drive this host from now on: every Docker and Compose call of this process goes to its endpoint
    (DOCKER_HOST, as `docker -H` and Docker contexts do), and GPU questions to its nvidia-smi."""
    from labctl.host.gpus import inventory as gpu

    if entry.docker != LOCAL:
        os.environ["DOCKER_HOST"] = entry.docker
    elif _USER_DOCKER_HOST is not None:  # local: the DOCKER_HOST the user set, or Docker's own default
        os.environ["DOCKER_HOST"] = _USER_DOCKER_HOST
    else:
        os.environ.pop("DOCKER_HOST", None)
    gpu.use_command(None if entry.name == LOCAL and entry.nvidia_smi == ("nvidia-smi",) else entry.nvidia_smi_argv())
