"""The hosts file, read and checked: each host's Docker endpoint (reached the way Docker itself reaches remote
daemons: `unix://` sockets, `ssh://user@host`) and the command that answers `nvidia-smi` queries on it.

Where they are written down: `$LABCTL_HOSTS`, else `~/.config/labctl/hosts.yaml` (the user's;
`$XDG_CONFIG_HOME/labctl/hosts.yaml` when that is set), merged over
the lab's own `hosts.yaml` (a lab may ship hosts, such as the simulated ones). A test lab's registration
(`build/remote-lab/hosts.yaml`, written by `make remote-lab`) is known by name (`--host labb`) but not
listed with the configured hosts. No secrets live here: SSH keys stay in the user's SSH setup."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from labctl.catalog.fields import Field, check_mapping
from labctl.catalog.sourcefile import load_yaml_mapping
from labctl.catalog.user_folders import config_folder
from labctl.errors import BadInput

LOCAL = "local"
HOST_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}\Z")
_ENDPOINT = re.compile(
    r"local\Z|unix:///[A-Za-z0-9._/-]{1,200}\Z|ssh://[a-z_][a-z0-9_-]{0,31}@[A-Za-z0-9.-]{1,253}(?::[0-9]{1,5})?\Z"
)
SOCKET_PATH = re.compile(r"/[A-Za-z0-9._/-]{1,200}\Z")
ARGV_WORD = re.compile(r"[A-Za-z0-9._/=:+-]{1,256}\Z")


def is_endpoint(text: str) -> bool:
    """local, a unix socket, or ssh://user@host with an optional TCP port (1-65535)."""
    if _ENDPOINT.match(text) is None:
        return False
    port = text.rpartition(":")[2] if text.startswith("ssh://") and text.count(":") == 2 else "22"
    return 0 < int(port) < 65536


HOST_FIELDS = {
    "docker": Field(
        "str",
        "local, unix:///path/to/docker.sock or ssh://user@host[:port]",
        required=True,
        check=is_endpoint,
    ),
    "nvidia_smi": Field(
        "list",
        "the command that answers nvidia-smi queries on that host, e.g. [nvidia-smi]",
        item=Field("str", "a plain argv word", check=lambda v: ARGV_WORD.match(v) is not None),
    ),
    "simulated": Field("bool", default=False),
    "socket": Field(
        "str",
        "the Docker daemon's unix socket as that host sees it (default /var/run/docker.sock; a watcher mounts it)",
        check=lambda v: SOCKET_PATH.match(v) is not None,
    ),
    "unified_memory_gib": Field(
        "float",
        "a unified-memory GPU's share of the host's memory, in GiB (default: read from the host)",
        check=lambda v: 0 < v <= 100_000,
    ),
    "gpu_hour_price": Field(
        "float",
        "what one GPU-hour on this host costs, in the lab's currency (e.g. 2.49), above 0 and at most 10000: "
        "bench results then give a cost per million output tokens",
        check=lambda v: 0 < v <= 10_000,
    ),
}
FILE_FIELDS = {
    "hosts": Field("map", "host name to its entry", default=dict, item=Field("map", "a host entry")),
    "default": Field("str", "the host used when no --host is given"),
    "clusters": Field(
        "map", "Slurm cluster name to its entry (catalog/clusters_file.py)", default=dict, item=Field("map")
    ),
}


@dataclass(frozen=True)
class HostEntry:
    name: str
    docker: str = LOCAL
    nvidia_smi: tuple[str, ...] = ("nvidia-smi",)
    simulated: bool = False  # a test lab's host: its GPUs are simulated, its runs never count as real-gpu
    unified_memory_gib: float | None = None
    socket: str = "/var/run/docker.sock"  # the daemon's socket on that host (a remote watcher mounts it)
    gpu_hour_price: float | None = None  # the lab's price of one GPU-hour here: cost per token

    @property
    def is_remote(self) -> bool:
        return self.docker.startswith("ssh://")

    def ssh_argv(self) -> list[str]:
        """`ssh [-p PORT] user@host`: the same account and address Docker's ssh:// transport uses."""
        target = self.docker.removeprefix("ssh://")
        host, _, port = target.partition(":")
        return ["ssh", "-o", "BatchMode=yes", *(["-p", port] if port else []), host]

    @property
    def address(self) -> str:
        """The host's address in its ssh:// endpoint (what a colleague's client reaches it by)."""
        return self.docker.removeprefix("ssh://").partition("@")[2].partition(":")[0]

    def forward_argv(self, remote_host: str, port: int, local_port: int) -> list[str]:
        """The `ssh -N -L` that makes an engine on the host's `remote_host:port` answer on this machine's
        loopback: the same account and address Docker's ssh:// transport uses."""
        ssh = self.ssh_argv()
        target = ssh[-1]
        return ["ssh", "-N", "-L", f"127.0.0.1:{local_port}:{remote_host}:{port}", *ssh[3:-1], target]

    def nvidia_smi_argv(self) -> list[str]:
        """Run on the host itself: over the same SSH transport Docker uses for an ssh:// endpoint."""
        if self.is_remote:
            return [*self.ssh_argv(), "--", *self.nvidia_smi]
        return list(self.nvidia_smi)


LOCAL_HOST = HostEntry(LOCAL)


@dataclass(frozen=True)
class Hosts:
    entries: dict[str, HostEntry]
    default: str = LOCAL
    registered: dict[str, HostEntry] = field(default_factory=dict)  # test labs: known by name, not listed

    def get(self, name: str | None) -> HostEntry:
        chosen = name or self.default
        if chosen == LOCAL and LOCAL not in self.entries:
            return LOCAL_HOST
        if chosen not in self.entries and chosen in self.registered:
            return self.registered[chosen]
        if chosen not in self.entries:
            known = ", ".join(sorted({LOCAL, *self.entries, *self.registered}))
            raise BadInput(f"unknown host {chosen!r}: known hosts are {known} (add one: labctl hosts add NAME URL).")
        return self.entries[chosen]

    def listed(self) -> list[HostEntry]:
        """The default host first, then every other configured host by name, and always `local`."""
        entries = [self.get(None)] + [e for name, e in sorted(self.entries.items()) if name != self.default]
        if all(e.name != LOCAL for e in entries):
            entries.append(self.get(LOCAL))
        return entries


def user_hosts_file() -> Path:
    explicit = os.environ.get("LABCTL_HOSTS")
    if explicit:
        return Path(explicit).expanduser()
    return config_folder() / "hosts.yaml"


TEST_LAB_HOSTS = ("build/remote-lab/hosts.yaml", "build/slurm-lab/hosts.yaml")


def load_hosts(lab_root: Path) -> Hosts:
    entries: dict[str, HostEntry] = {}
    default = LOCAL
    for path in (lab_root / "hosts.yaml", user_hosts_file()):
        file_entries, file_default = _read_entries(path)
        entries.update(file_entries)
        default = file_default or default
    if default != LOCAL and default not in entries:
        raise BadInput(f"hosts: the default host {default!r} has no entry.")
    registered: dict[str, HostEntry] = {}
    for relative in TEST_LAB_HOSTS:
        registered.update(_read_entries(lab_root / relative)[0])
    return Hosts(entries, default, registered)


def _read_entries(path: Path) -> tuple[dict[str, HostEntry], str | None]:
    if not path.is_file():
        return {}, None
    src = load_yaml_mapping(path, display=str(path))
    spec = check_mapping(src, (), src.data, FILE_FIELDS)
    entries = {}
    for name, raw in (spec["hosts"] or {}).items():
        if not isinstance(name, str) or not HOST_NAME.match(name):
            raise src.problem(
                ("hosts",), f"host name {name!r} is not allowed: lower-case letters, digits, '.', '_', '-'."
            )
        entry = check_mapping(src, ("hosts", name), raw, HOST_FIELDS)
        entries[name] = HostEntry(
            name,
            entry["docker"],
            tuple(entry["nvidia_smi"] or ("nvidia-smi",)),
            bool(entry["simulated"]),
            entry["unified_memory_gib"],
            entry["socket"] or "/var/run/docker.sock",
            entry["gpu_hour_price"],
        )
    return entries, spec["default"]
