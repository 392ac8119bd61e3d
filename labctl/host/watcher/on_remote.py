"""A resident run's restart watcher on a host reached over Docker's transport (ssh://). The run's folder is
not on that host, so the watcher's program and what it records live in a named volume there,
`labctl-watch-<run_id>`: filled through the transport (the program on a short-lived container's stdin),
read back by the controller (`docker cp` of its events file) at `status`, `show` and `down`.

The socket the watcher mounts is the daemon's *as that host sees it* (the host entry's `socket:`); the
filling container checks that this socket answers as the very daemon labctl drives (its ID), so a wrong
path never points a watcher at another daemon."""

from __future__ import annotations

import io
import subprocess
import tarfile

from labctl.errors import LabctlError
from labctl.host.docker import daemon as dk

RUN_DIR = "/labctl-run"
_INSTALL = (
    "import http.client, json, socket, sys\n"
    "class Unix(http.client.HTTPConnection):\n"
    "    def connect(self):\n"
    "        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "        self.sock.settimeout(10)\n"
    "        self.sock.connect('/var/run/docker.sock')\n"
    "try:\n"
    "    conn = Unix('docker', timeout=10)\n"
    "    conn.request('GET', '/info')\n"
    "    found = json.loads(conn.getresponse().read()).get('ID')\n"
    "except OSError as exc:\n"
    "    sys.exit(f'no Docker daemon answers on {sys.argv[2]} there ({exc})')\n"
    "if found != sys.argv[1]:\n"
    "    sys.exit(f'{sys.argv[2]} there is daemon {found}, not the one labctl drives ({sys.argv[1]})')\n"
    f"open('{RUN_DIR}/watcher.py', 'w', encoding='utf-8').write(sys.stdin.read())\n"
)


def volume_name(run_id: str) -> str:
    return f"labctl-watch-{run_id}"


def install(run_id: str, label: str, program: str, image: str, socket: str, daemon_id: str) -> str:
    """Create the run's watch volume and put the watcher program in it, after checking that `socket` is the
    daemon `daemon_id`; returns the volume's name. LabctlError says why not (no python3 in `image`, another
    daemon's socket)."""
    name = volume_name(run_id)
    with dk.docker_errors(f"creating the watch volume {name}"):
        dk.client().volume.create(name, labels={label: run_id})
    # The CLI, to feed the program on the container's stdin.
    argv = [*dk.cli_argv(), "run", "-i", "--rm", "--network", "none", "--user", "0:0", "--cap-drop", "ALL"]
    argv += ["--security-opt", "no-new-privileges", "--log-driver", "none", "--label", f"{label}={run_id}"]
    argv += ["--mount", f"type=volume,source={name},target={RUN_DIR}"]
    argv += ["--mount", f"type=bind,source={socket},target=/var/run/docker.sock"]
    argv += ["--entrypoint", "python3", image, "-c", _INSTALL, daemon_id, socket]
    try:
        proc = subprocess.run(argv, input=program, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise LabctlError(f"installing the watcher into volume {name} took over 120 s") from None
    if proc.returncode != 0:
        raise LabctlError((proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1])
    return name


def read_file(container: str, name: str) -> str | None:
    """A file of the watch volume, through the watcher's container (`docker cp`, a tar stream); None when
    the container or the file is not there."""
    try:  # `docker cp … -` streams a tar to stdout; python-on-whales copies only to a path on this machine
        proc = subprocess.run(
            [*dk.cli_argv(), "cp", f"{container}:{RUN_DIR}/{name}", "-"], capture_output=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        return None
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as archive:
        member = next((m for m in archive.getmembers() if m.isfile()), None)
        handle = archive.extractfile(member) if member else None
        return handle.read(16 * 1024 * 1024).decode("utf-8", "replace") if handle else None


def remove(run_id: str) -> bool:
    return dk.remove_volume(volume_name(run_id), "watch volume")
