"""A resident run's API keys on a host reached over Docker's transport (ssh://): a named volume
`labctl-keys-<run_id>` on that host, filled by a short-lived container that reads the key file from its
stdin. Nothing else crosses to the host: no scp, no ssh account of its own, and the keys are never in an
argv, a label, a compose file or a log — only in the volume, readable by the engine image's user alone."""

from __future__ import annotations

import subprocess

from labctl.errors import LabctlError
from labctl.host.docker import daemon as dk

LABEL = "labctl.keys_of"
FILL_TIMEOUT_S = 120.0

# Runs as root inside the throwaway container (no network, only CHOWN): the file is written beside the old
# one and renamed over it, so an engine (re)starting meanwhile reads the old keys or the new, never half a
# file; an empty stdin leaves the old file alone and fails.
_FILL = (
    'umask 077 && cat > "/keys/.$2.new" && [ -s "/keys/.$2.new" ] && chmod 0400 "/keys/.$2.new" '
    '&& chown "$1" "/keys/.$2.new" && mv -f "/keys/.$2.new" "/keys/$2"'
)
# The files a key volume holds: the keys clients use, and (behind labctl's proxy) the engine's own key.
FILES = ("api_key", "engine_key")


def volume_name(run_id: str) -> str:
    return f"labctl-keys-{run_id}"


def write_keys(run_id: str, text: str, image: str, owner: str, file: str = "api_key") -> str:
    """Create (or reuse) the run's key volume and write `text` into it as `file` (one of FILES), owned by
    `owner` (the engine image's user: `uid:gid`, or a name the image knows) with mode 0400. Returns the
    volume's name."""
    if file not in FILES:
        raise ValueError(f"a key volume holds only {FILES}, not {file!r}")
    name = volume_name(run_id)
    with dk.docker_errors(f"creating the key volume {name}"):
        dk.client().volume.create(name, labels={LABEL: run_id})
    # The CLI, to feed the keys on the container's stdin (never argv, never a file on this machine).
    argv = [
        *dk.cli_argv(),
        "run",
        "-i",
        "--rm",
        "--network",
        "none",
        "--user",
        "0:0",
        "--cap-drop",
        "ALL",
        "--cap-add",
        "CHOWN",
        "--security-opt",
        "no-new-privileges",
        "--memory",
        "64m",
        "--log-driver",
        "none",
        "--label",
        f"{LABEL}={run_id}",
        "--mount",
        f"type=volume,source={name},target=/keys",
        "--entrypoint",
        "sh",
        image,
        "-c",
        _FILL,
        "labctl-keys",
        owner,
        file,
    ]
    try:
        proc = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=FILL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise LabctlError(
            f"writing the keys into volume {name} took over {FILL_TIMEOUT_S:g} s: is the Docker host reachable?"
        ) from None
    if proc.returncode != 0:
        problem = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise LabctlError(
            f"writing the API keys into volume {name} with {image} failed (exit {proc.returncode}): {problem}"
        )
    return name


def remove(run_id: str) -> bool:
    """Remove the run's key volume; False when there was none. Its containers must be gone first."""
    return dk.remove_volume(volume_name(run_id), "key volume")


def key_volumes() -> dict[str, str]:
    """Every labctl key volume on the host: volume name -> run id."""
    with dk.docker_errors("listing key volumes"):
        found = dk.client().volume.list(filters={"label": LABEL})
    return {str(v.name): str((v.labels or {}).get(LABEL, "")) for v in found}
