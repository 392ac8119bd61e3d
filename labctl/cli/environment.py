"""The environment variables labctl reads, in one table: each command's `--help` ends with the ones that
affect it, `labctl --help` with all of them, and the reference page (docs/reference/environment.md) is written
from the same rows. The variables themselves are read where they act (host, run, catalog)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

import typer

EVERY = "*"  # a variable every command reads (the lab, the home, the hosts file, tracebacks)

_REACH = ("up", "down", "status", "logs", "gc", "share", "rotate-key", "reproduce", "bench run", "study run")
_START = ("up", "reproduce", "study run")
_FETCH = ("up", "fetch", "pin", "reproduce", "study plan", "study run")


@dataclass(frozen=True)
class Variable:
    name: str
    what: str
    commands: tuple[str, ...]  # command paths without "labctl" ("bench run"), or (EVERY,)


VARIABLES: tuple[Variable, ...] = (
    Variable("LABCTL_LAB", "the lab folder, as --lab (which wins)", (EVERY,)),
    Variable("LABCTL_HOME", "where runs/ live, as --home (which wins)", (EVERY,)),
    Variable("LABCTL_DEBUG", "1 shows tracebacks, as --debug", (EVERY,)),
    Variable("LABCTL_HOSTS", "your hosts file (default ~/.config/labctl/hosts.yaml)", (EVERY,)),
    Variable(
        "XDG_CONFIG_HOME",
        "where your settings live: XDG_CONFIG_HOME/labctl holds the hosts file and the default lab (default ~/.config)",
        (EVERY,),
    ),
    Variable(
        "XDG_DATA_HOME",
        "where runs of the read-only packaged lab live: XDG_DATA_HOME/labctl (default ~/.local/share)",
        (EVERY,),
    ),
    Variable(
        "LABCTL_HOST_TIMEOUT_S",
        "seconds a host's Docker may take to answer, 1-600 (default 10; status gives each host three times that, "
        "then says it is unreachable and exits 1)",
        _REACH,
    ),
    Variable(
        "LABCTL_CACHE_DIR",
        "the host's model cache, as --cache-dir (default ~/.cache/huggingface)",
        (*_FETCH, "gc"),
    ),
    Variable("LABCTL_DISK_RESERVE_GIB", "GiB kept free for everyone else before a pull or a fetch", _FETCH),
    Variable("LABCTL_LOCK_FILE", "the host-wide GPU lock (default /tmp/labctl-gpus.lock)", (*_START, "down")),
    Variable("LABCTL_ENGINE_LOCK_DIR", "the folder of the per-engine start locks (default /tmp)", (*_START, "down")),
    Variable(
        "LABCTL_HOMES_FILE",
        "the list of labctl homes on this host, which gc reads to keep what other homes use (default /tmp/labctl-homes)",
        (*_START, "gc"),
    ),
    Variable(
        "LABCTL_ENGINE_STORE",
        "where built TensorRT-LLM engines are kept (default ~/.cache/labctl/trt-engines)",
        (*_START, "render"),
    ),
    Variable(
        "LABCTL_TINY_MODELS",
        "the lab's tiny test models that `hub serve` and `hub: loopback` profiles serve (default build/tiny-models)",
        (*_FETCH, "hub serve"),
    ),
    Variable(
        "LABCTL_HARNESS_BASE", "the base image the harness engine's image is built on, when it is missing", _START
    ),
    Variable("LABCTL_CLIENT_IMAGE", "the image of the bench client on a remote host", ("bench run", "study run")),
    Variable("LABCTL_SANDBOX_IMAGE", "the image the code checks of `eval` run in", ("eval run", "study run")),
    Variable("LABCTL_WATCH_IMAGE", "the image of the restart watcher of resident runs", ("up",)),
    Variable(
        "DOCKER_CONFIG",
        "Docker's client configuration folder (default ~/.docker): the registry logins pin and pulls use",
        ("pin", "up", "reproduce", "study plan", "study run"),
    ),
    Variable("HF_TOKEN", "your Hub token, sent only to the Hub (gated models and datasets)", (*_FETCH, "eval run")),
    Variable("HF_ENDPOINT", "a Hub mirror instead of huggingface.co", (*_FETCH, "eval run")),
)


def affecting(path: str) -> list[Variable]:
    """The variables that affect one command (path without "labctl"); those of every command are left to the top."""
    return [v for v in VARIABLES if path in v.commands]


def _lines(variables: list[Variable]) -> str:
    # \b: click keeps the paragraph that follows as written (one variable a line) instead of rewrapping it.
    wrapped = (
        textwrap.fill(f"{v.name}: {v.what}", 96, initial_indent="  ", subsequent_indent="      ") for v in variables
    )
    return "\b\n" + "\n".join(wrapped)


def epilog(path: str) -> str:
    """The end of a command's --help ("" when no variable is its own); `path` "" is `labctl` itself."""
    if path == "":
        every = [v for v in VARIABLES if EVERY in v.commands]
        others = ", ".join(v.name for v in VARIABLES if EVERY not in v.commands)
        return (
            f"Environment (every command):\n\n{_lines(every)}\n\n"
            f"Some commands read more ({others}): their --help says which."
        )
    own = affecting(path)
    return f"Environment:\n\n{_lines(own)}" if own else ""


def annotate(app: typer.Typer, prefix: str = "") -> None:
    """Give every registered command (and group) the epilog its variables call for; call it once, after the
    commands are registered. Typer builds its click commands from these infos on each call."""
    if not prefix:
        app.info.epilog = epilog("")
    for command in app.registered_commands:
        name = command.name or typer.main.get_command_name(_callback_name(command))
        command.epilog = epilog(f"{prefix}{name}") or None
    for group in app.registered_groups:
        sub = group.typer_instance
        assert sub is not None and group.name is not None
        path = f"{prefix}{group.name}"
        if own := epilog(path):
            group.epilog = own
        annotate(sub, f"{path} ")


def _callback_name(command: Any) -> str:
    return str(command.callback.__name__)


def reference_page() -> str:
    """docs/reference/environment.md: every variable, what it sets, the commands it affects."""
    rows = ["| variable | what it sets | commands |", "|---|---|---|"]
    for v in VARIABLES:
        where = "every command" if EVERY in v.commands else ", ".join(f"`{c}`" for c in v.commands)
        rows.append(f"| `{v.name}` | {v.what} | {where} |")
    head = (
        "# Environment variables\n\n"
        "<!-- Generated by `make reference` from labctl/cli/environment.py. Do not edit: a test fails when this\n"
        "page and the table differ. -->\n\n"
        "Each command's `--help` ends with the variables that affect it, and `labctl --help` with those every\n"
        "command reads. An option given on the command line wins over its variable.\n\n"
    )
    return head + "\n".join(rows) + "\n"
