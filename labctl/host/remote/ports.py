"""Which TCP ports a remote host listens on, read from its kernel's /proc/net/tcp and tcp6 over the same SSH
account Docker's ssh:// transport uses: `up` refuses a port that a process labctl did not start holds there
(on this machine a bind test answers that; over SSH only the host's own kernel can)."""

from __future__ import annotations

import ipaddress
import subprocess

from labctl.catalog.hosts_file import HostEntry

LISTEN = "0A"
MAX_TABLE = 8 * 1024 * 1024


def listeners(entry: HostEntry, timeout: float = 20.0) -> set[tuple[str, int]] | None:
    """(address, port) of every listening TCP socket on the host; None when the host cannot tell."""
    argv = [*entry.ssh_argv(), "--", "cat", "/proc/net/tcp", "/proc/net/tcp6"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or len(done.stdout) > MAX_TABLE:
        return None
    return parse_tables(done.stdout.decode("ascii", "replace"))


def parse_tables(text: str) -> set[tuple[str, int]]:
    found = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[3] != LISTEN or ":" not in fields[1]:
            continue
        address, _, port = fields[1].partition(":")
        try:
            found.add((_address(address), int(port, 16)))
        except ValueError:
            continue
    return found


def holds(found: set[tuple[str, int]], bind: str, port: int) -> str | None:
    """The listener that a bind to (bind, port) would collide with, if any."""
    wildcard = {"0.0.0.0", "::"}
    for address, taken in sorted(found):
        if taken == port and (address == bind or address in wildcard or bind in wildcard or bind == ""):
            return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    return None


def _address(hex_text: str) -> str:
    """The kernel prints addresses as 32-bit words in host (little-endian) byte order."""
    raw = bytes.fromhex(hex_text)
    if len(raw) not in (4, 16):
        raise ValueError(hex_text)
    swapped = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(swapped)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)
