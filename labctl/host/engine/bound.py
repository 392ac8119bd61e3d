"""The addresses an engine really listens on: its container's network namespace's /proc/net/tcp and tcp6,
read with `docker exec` (the same on this machine and on an ssh:// host, and no process ids to map between
namespaces) and parsed like a remote host's port table (remote_ports.parse_tables). With host networking the
namespace is the host's, so every listener on the engine's port counts, whoever opened it."""

from __future__ import annotations

from labctl.errors import LabctlError
from labctl.host.docker.daemon import Container, DockerException, client
from labctl.host.remote.ports import MAX_TABLE, parse_tables


def listeners(container: Container) -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket in the container's network namespace."""
    text = ""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            text += str(client().container.execute(container, ["cat", table])) + "\n"
        except DockerException as exc:
            if table.endswith("6") and text:
                continue  # a kernel without IPv6 has no tcp6 table
            detail = (exc.stderr or "").strip().splitlines()[-1:] or [f"exit code {exc.return_code}"]
            raise LabctlError(
                f"cannot read which addresses the engine listens on ({table} in container {container.name}: "
                f"{detail[0][:200]}), so the recorded address cannot be checked"
            ) from None
        if len(text) > MAX_TABLE:
            raise LabctlError(f"{table} in container {container.name} is larger than {MAX_TABLE} bytes")
    return parse_tables(text)


def bound_problem(found: set[tuple[str, int]], expected: str, port: int) -> str | None:
    """None when `port` is listened on at `expected` and nowhere else; else what was found."""
    on_port = sorted(address for address, taken in found if taken == port)
    if not on_port:
        return f"nothing listens on port {port} in the engine's network namespace"
    other = [address for address in on_port if address != expected]
    if other:
        shown = ", ".join(f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in other)
        return f"the engine listens on {shown}"
    return None
