"""Profile -> compose file text. Pure: same inputs, byte-identical output; only `save_compose` writes.

Profile values are data, never template code: every value reaches the template as a YAML scalar
quoted by `yaml.safe_dump`, with `$` doubled so that Compose does not interpolate it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import string
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml

from labctl import __version__
from labctl.catalog.engines import Engine
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile
from labctl.compose.labels import GpuClaim, RunLabels
from labctl.errors import LabctlError
from labctl.host.files.atomic import write_atomically

TEMPLATE = "compose.yaml.j2"
ENGINE_STORE_TARGET = "/engines"
SECRETS_TARGET = "/run/labctl"
ENGINE_KEY_FILE = "engine_key"  # = labctl.run.resident.keys.ENGINE_KEY (the render knows only the name)
HUB_OFFLINE = "HF_HUB_OFFLINE=1"


@dataclass(frozen=True)
class RenderOptions:
    """Host-specific inputs: where the model cache and built engines live on this host, run labels."""

    cache_dir: str | None = None
    engine_store: str | None = None
    allow_unsupported: bool = False
    restart: str = "no"
    labels: dict[str, str] = field(default_factory=dict)
    secrets_dir: str | None = None  # host folder holding the API key file (resident deployments)
    secrets_volume: str | None = None  # or a named volume holding it (a remote host: filled over Docker's transport)
    key_group: int | None = None  # a group the engine joins to read that file (it is not the image user's own)
    environment_label: str | None = None  # harness-check on a simulated GPU host, whatever the engine says
    image: str | None = None  # the image id of an image copied to a host (no repo digest there); else the profile's
    proxy: ProxySetup | None = None  # labctl's authenticating proxy in front of an engine that leaves routes open


@dataclass(frozen=True)
class ProxySetup:
    """The proxy publishes the run's address; the engine listens on 127.0.0.1:engine_port behind it, with a key
    of its own (engine_key) that the proxy sends upstream. Only the exact paths in `open_paths` (the engine's
    readiness probe) answer without a key."""

    image: str
    engine_port: int
    open_paths: tuple[str, ...]


def quote(value: Any) -> str:
    """One YAML double-quoted scalar, with `$` escaped for Compose."""
    if not isinstance(value, str):
        raise LabctlError(f"internal: quote() expects a string, got {type(value).__name__}")
    text = yaml.safe_dump(value, default_style='"', allow_unicode=True, width=math.inf).rstrip("\n")
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    return text.replace("$", "$$")


def comment_safe(value: Any) -> str:
    """Text inside a `#` comment line: names are checked long before this, but a newline here would turn
    the rest of the line into live YAML, so anything outside a name's characters becomes '?'."""
    return re.sub(r"[^A-Za-z0-9._+-]", "?", str(value))


def number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LabctlError(f"internal: number() expects a number, got {value!r}")
    return repr(value)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["q"] = quote
    env.filters["num"] = number
    env.filters["comment"] = comment_safe
    return env


def placeholder_values(
    profile: Profile, engine_dir: str | None, api_key_file: str | None, behind: int | None = None
) -> dict[str, Any]:
    """`behind`: the loopback port of an engine behind labctl's proxy, which takes the profile's address."""
    model = profile.model
    build = profile.build
    tp = profile.gpu_count if profile.gpu_count > 1 else None
    host = profile.bind_address if profile.network == "host" else "0.0.0.0"
    return {
        "model": model.id,
        "revision": model.revision,
        "served_model_name": profile.served_model_name,
        "host": "127.0.0.1" if behind is not None else host,
        "port": behind if behind is not None else profile.port,
        "max_model_len": profile.max_model_len,
        "max_num_seqs": profile.max_num_seqs,
        "gpu_memory_utilization": profile.gpu_memory_utilization,
        "tensor_parallel_size": tp,
        "engine_dir": engine_dir,
        "api_key_file": api_key_file,
        "reasoning_parser": model.reasoning_parser,
        "build_max_batch_size": build.max_batch_size if build else None,
        "build_max_num_tokens": build.max_num_tokens if build else None,
        "build_max_seq_len": build.max_seq_len if build else None,
    }


def expand_args(groups: Sequence[Sequence[str]], values: dict[str, Any]) -> list[str]:
    """Each argv group is emitted only when every placeholder in it has a value."""
    return [word.text for word in traced_args(groups, values, "")]


@dataclass(frozen=True)
class Word:
    """One argv word and where it came from, so that a refusal can point at the line to change."""

    text: str
    origin: str


def traced_args(groups: Sequence[Sequence[str]], values: dict[str, Any], origin: str) -> list[Word]:
    argv: list[Word] = []
    for index, group in enumerate(groups):
        names = {n for word in group for _, n, _, _ in string.Formatter().parse(word) if n is not None}
        if any(values.get(n) is None for n in names):
            continue
        # str.format does not re-read substituted values, so `{` or `}` in a value stays data.
        where = f"{origin}[{index}]"
        argv.extend(Word(word.format(**{n: str(values[n]) for n in names}), where) for word in group)
    return argv


@dataclass(frozen=True)
class ServeCommand:
    """What the engine is asked to run, before any key wrapper: its entrypoint and its argv, traced."""

    entrypoint: list[str]
    argv: list[Word]
    auth_argv: list[Word]  # the key options the engine sees when a key is given (flag/file kinds)

    @property
    def words(self) -> list[str]:
        return [w.text for w in self.argv]


def serve_command(profile: Profile, key_file: str | None, behind: int | None = None) -> ServeCommand:
    server = profile.engine.server
    engine_build = profile.engine.build
    engine_dir = f"{ENGINE_STORE_TARGET}/{build_key(profile)}" if profile.build else None
    values = placeholder_values(profile, engine_dir, key_file, behind)
    if profile.build and engine_build:
        argv = traced_args(engine_build.serve_args, values, "build.serve_args")
    else:
        argv = traced_args(server.args, values, "server.args")
    options_file = profile.engine.options_file
    if options_file is not None:
        argv += [Word(options_file.flag, "options_file.flag"), Word(options_file.target, "options_file.target")]
    if profile.model.thinking == "off":
        argv += traced_args(server.thinking_off_args, values, "server.thinking_off_args")
    argv += [Word(word, f"extra_args[{i}]") for i, word in enumerate(profile.extra_args)]
    auth = profile.engine.auth
    auth_argv: list[Word] = []
    if key_file and auth.kind == "file":
        auth_argv = traced_args([auth.args], values, "auth.args")
    elif key_file and auth.kind == "flag":
        auth_argv = [Word(word, "auth.args") for word in auth.args] + [Word("KEY", "the key file")]
    return ServeCommand(list(server.entrypoint), argv, auth_argv)


def build_key(profile: Profile) -> str:
    """Engine directory name: what fixes a TensorRT engine (image, model revision, build limits)."""
    build = profile.build
    basis = {
        "image": profile.image_digest or profile.image_text,
        "model": profile.model.id,
        "revision": profile.model.revision,
        "build": None if build is None else asdict(build),
        "tp": profile.gpu_count,
    }
    digest = hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]
    # trtllm-serve lists a built engine under its folder's name: the leaf is the served name (a safe word,
    # checked with the profile), the parent the key.
    return f"{digest}/{profile.served_model_name}"


# Keys fail closed: an engine never starts without its key. A missing, unreadable or empty key file stops
# the container (exit 78, EX_CONFIG) with one line saying so, instead of serving everyone.
_REFUSE = (
    'echo "labctl: the API key file {file} is missing, unreadable or empty: refusing to serve without keys" >&2; '
    "exit 78"
)
_READ_KEY = 'key="$({reader} {file} 2>/dev/null)" && [ -n "$key" ] || {{ ' + _REFUSE + "; }}"
_CHECK_KEY_FILE = "[ -r {file} ] && [ -s {file} ] || {{ " + _REFUSE + "; }}"


def compose_context(profile: Profile, options: RenderOptions) -> dict[str, Any]:
    engine = profile.engine
    build = profile.build
    auth = engine.auth
    key_file = f"{SECRETS_TARGET}/api_key" if options.secrets_dir or options.secrets_volume else None
    engine_dir = f"{ENGINE_STORE_TARGET}/{build_key(profile)}" if build else None
    proxy = options.proxy if key_file else None
    if proxy is not None:
        key_file = f"{SECRETS_TARGET}/{ENGINE_KEY_FILE}"  # the engine's own key; the proxy reads api_key
    serve = serve_command(profile, key_file, proxy.engine_port if proxy else None)
    command = serve.words
    entrypoint = serve.entrypoint or None
    environment = list(profile.env_names)
    cpu, backend = profile.cpu, engine.cpu_backend
    if cpu is not None and backend is not None:
        environment += [f"{backend.kv_cache_env}={cpu.kv_cache_gib}", f"{backend.cores_env}={cpu.cores}"]
    if engine.model_cache:
        # labctl fetched the model before the start (`labctl fetch`): a cold start never includes a download.
        environment.append(HUB_OFFLINE)
    wrapper = None
    if key_file and auth.kind == "file":
        command += [w.text for w in serve.auth_argv]
        # The engine reads the file itself; the wrapper only refuses to start it without a usable one.
        wrapper = f'{_CHECK_KEY_FILE.format(file=key_file)}; exec "$@"'
    elif key_file and auth.kind == "flag":
        # The engine reads its key only from argv: a shell reads the file at start, so the key is
        # in no compose file or record (it is visible in the container's process list only). The
        # engine's own words stay positional parameters, never shell text.
        command += list(auth.args)
        wrapper = f'{_READ_KEY.format(reader="head -n 1", file=key_file)}; exec "$@" "$key"'
    elif key_file and auth.kind == "env":
        wrapper = f'{_READ_KEY.format(reader="cat", file=key_file)}; export {auth.env}="$key"; exec "$@"'
    if wrapper:
        entrypoint, command = ["sh", "-c", wrapper, "labctl-serve"], (entrypoint or []) + command
    labels = RunLabels(
        engine=engine.name,
        profile=profile.name,
        profile_sha256=profile.sha256,
        gpus=GpuClaim(tuple(profile.gpu_ids), profile.gpu_count),
        model=profile.model.id,
        model_revision=profile.model.revision,
        environment_label=options.environment_label or engine.environment_label,
        allow_unsupported=bool(options.allow_unsupported and profile.support_problem),
        version=__version__,
        build={k: str(v) for k, v in (asdict(build) if build else {}).items()},
    ).setup_labels()
    labels.update(options.labels)
    volumes = []
    if engine.model_cache and options.cache_dir:
        volumes.append({"type": "bind", "source": options.cache_dir, "target": engine.model_cache, "read_only": False})
    if build and options.engine_store:
        volumes.append(
            {"type": "bind", "source": options.engine_store, "target": ENGINE_STORE_TARGET, "read_only": False}
        )
    if options.secrets_dir:
        volumes.append({"type": "bind", "source": options.secrets_dir, "target": SECRETS_TARGET, "read_only": True})
    elif options.secrets_volume:
        volumes.append(
            {"type": "volume", "source": options.secrets_volume, "target": SECRETS_TARGET, "read_only": True}
        )
    return {
        "version": __version__,
        "engine": engine.name,
        "profile": profile.name,
        "profile_sha256": profile.sha256,
        "image": options.image or profile.image_text,
        "entrypoint": entrypoint,
        "command": command,
        "environment": environment,
        "labels": dict(sorted(labels.items())),
        "network": profile.network,
        "host": profile.bind_address,
        "port": profile.port,
        "gpus": {"device_ids": profile.gpu_ids, "count": profile.gpu_count} if engine.needs_gpu else None,
        "cpu": None
        if cpu is None
        else {"cpuset": cpu.cores, "cpus": str(cpu.core_count), "mem_limit": f"{cpu.memory_gib}g"},
        "docker": engine.docker_options,
        "volumes": volumes,
        # labctl creates and removes the key volume itself (external): compose never makes an empty one.
        "named_volumes": [v["source"] for v in volumes if v["type"] == "volume"],
        "restart": options.restart,
        "group_add": [str(options.key_group)] if key_file and options.key_group is not None else [],
        "build": build_service(profile, engine_dir) if build else None,
        "proxy": proxy_service(profile, proxy) if proxy else None,
        "secrets_target": SECRETS_TARGET,
        "options_file": _options_file(engine),
    }


def proxy_listen(profile: Profile) -> str:
    host = profile.bind_address
    return f"[{host}]:{profile.port}" if ":" in host else f"{host}:{profile.port}"


def proxy_service(profile: Profile, proxy: ProxySetup) -> dict[str, Any]:
    if profile.network != "host":  # up refuses it first (run/resident/lockdown.py): the engine would not be behind it
        raise LabctlError(f"{profile.engine.name}/{profile.name}: labctl's proxy runs only with `network: host`.")
    return {
        "image": proxy.image,
        "command": ["serve", proxy_listen(profile), str(proxy.engine_port), *proxy.open_paths],
    }


OPTIONS_CONFIG = "engine_options"  # the compose config that carries the engine's options file


def _options_file(engine: Engine) -> dict[str, str] | None:
    options_file = engine.options_file
    if options_file is None:
        return None
    return {"name": OPTIONS_CONFIG, "target": options_file.target, "text": options_file.text}


def build_service(profile: Profile, engine_dir: str | None) -> dict[str, Any]:
    engine_build = profile.engine.build
    limits = profile.build
    assert engine_build is not None and limits is not None  # a build profile is checked against its engine at load
    values = {
        "model": profile.model.id,
        "revision": profile.model.revision,
        "ckpt_dir": f"{engine_dir}.ckpt",
        "engine_dir": engine_dir,
        "tp_size": profile.gpu_count or 1,
        **asdict(limits),
    }
    script = engine_build.convert[profile.model.family] + "\n" + engine_build.script
    return {
        "entrypoint": ["sh", "-c", script, "labctl-build"],
        "command": [str(values[p]) for p in engine_build.params],
    }


def render_compose(lab: Lab, profile: Profile, options: RenderOptions) -> str:
    template = _environment().from_string((lab.templates_dir / TEMPLATE).read_text(encoding="utf-8"))
    text = template.render(**compose_context(profile, options))
    yaml.safe_load(text)  # a template bug must never reach Docker
    return text


def compose_path(lab: Lab, profile: Profile) -> Path:
    return lab.compose_dir / f"{profile.engine.name}-{profile.name}.yaml"


def save_compose(lab: Lab, profile: Profile, text: str) -> Path:
    path = compose_path(lab, profile)
    write_atomically(path, text)
    return path
