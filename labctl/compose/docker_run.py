"""A rendered compose service as the equivalent plain `docker run` command, for someone without labctl."""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath
from typing import Any

from labctl.catalog.sourcefile import parse_yaml

# Labels that name one labctl run: a container started by hand is not that run.
RUN_SPECIFIC = {"labctl.run_id", "labctl.owner", "labctl.created_at"}


def _unescape(value: Any) -> str:
    return str(value).replace("$$", "$")


def _config_file(name: str, target: str) -> str:
    return f"{name}-{PurePosixPath(target).name}"


def docker_run_argv(service: dict[str, Any], image: str, name: str) -> list[str]:
    argv = ["docker", "run", "--detach", "--name", name]
    if service.get("network_mode") == "host":
        argv += ["--network", "host"]
    for mapping in service.get("ports") or []:
        argv += ["--publish", _unescape(mapping)]
    if service.get("ipc"):
        argv += ["--ipc", service["ipc"]]
    if service.get("shm_size"):
        argv += ["--shm-size", str(service["shm_size"])]
    for limit, value in (service.get("ulimits") or {}).items():
        argv += [
            "--ulimit",
            f"{limit}={value}" if isinstance(value, int) else f"{limit}={value['soft']}:{value['hard']}",
        ]
    restart = service.get("restart")
    if restart and restart != "no":
        argv += ["--restart", restart]
    devices = ((service.get("deploy") or {}).get("resources") or {}).get("reservations", {}).get("devices") or []
    for device in devices:
        if device.get("device_ids"):
            argv += ["--gpus", f'"device={",".join(device["device_ids"])}"']
        else:
            argv += ["--gpus", str(device.get("count", "all"))]
    for volume in service.get("volumes") or []:
        kind = "volume" if volume.get("type") == "volume" else "bind"
        mount = f"type={kind},source={_unescape(volume['source'])},target={_unescape(volume['target'])}"
        argv += ["--mount", mount + (",readonly" if volume.get("read_only") else "")]
    for config in service.get("configs") or []:  # written beside you first (see docker_run_commands)
        target = _unescape(config["target"])
        argv += ["--mount", f"type=bind,source=./{_config_file(name, target)},target={target},readonly"]
    for env_name in service.get("environment") or []:
        argv += ["--env", _unescape(env_name)]  # a name (its value from your environment) or HF_HUB_OFFLINE=1
    for label, value in sorted((service.get("labels") or {}).items()):
        if label not in RUN_SPECIFIC:
            argv += ["--label", f"{label}={_unescape(value)}"]
    entrypoint = [_unescape(w) for w in service.get("entrypoint") or []]
    if entrypoint:
        argv += ["--entrypoint", entrypoint[0]]
    argv.append(image)
    argv += entrypoint[1:] + [_unescape(w) for w in service.get("command") or []]
    return argv


def docker_run_commands(compose_text: str, image: str, name: str) -> list[str]:
    compose = parse_yaml(compose_text, "compose.yaml", {})
    services = compose["services"]
    lines = []
    for config in services["serve"].get("configs") or []:  # a file the engine reads, written where you run this
        content = _unescape(compose["configs"][config["source"]]["content"])
        path = _config_file(name, _unescape(config["target"]))
        lines.append(f"{shlex.join(['printf', '%s', content])} > {shlex.quote(path)}")
    if "build" in services:
        build = docker_run_argv(services["build"], image, f"{name}-build")
        build[2] = "--rm"  # run the one-shot build in the foreground, then serve
        lines.append(shlex.join(build))
    lines.append(shlex.join(docker_run_argv(services["serve"], image, name)))
    return lines
