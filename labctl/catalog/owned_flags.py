"""One owner per rendered flag: what labctl renders into an engine's command line, a profile's `extra_args`
may not set again (engines honour the last one, so `--host 0.0.0.0` there would undo the bind address the
record states).

The owned options are derived from the engine file's argv groups (`server.args`, `build.serve_args`,
`server.thinking_off_args`, `auth.args`), the flag of its `options_file`, plus `server.owns`, the few the
engine would also take for what labctl sets another way. An `extra_args` word is matched the way the engine's parser reads it, from its CLI
contract: every name and alias of the option, `--flag=value`, a short option with its value attached,
an abbreviation argparse accepts, `_` for `-` (vLLM's parser), and a positional where the engine takes
the model labctl renders. Matching is deliberately wide: a word that *could* reach an owned option is
refused. An engine without a contract (the harness) is matched by name, `=` form and prefix.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

from labctl.catalog.contracts import CommandContract, contract_path, load_contract_cached
from labctl.catalog.engines import Engine
from labctl.catalog.sourcefile import KeyPath, SourceFile
from labctl.errors import BadInput

# Which profile field a placeholder comes from: the refusal says what to change instead.
FIELD_OF = {
    "model": "model.id",
    "revision": "model.revision",
    "served_model_name": "served_model_name",
    "host": "host",
    "port": "port",
    "max_model_len": "max_model_len",
    "max_num_seqs": "max_num_seqs",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "tensor_parallel_size": "gpus",
    "reasoning_parser": "model.reasoning_parser",
    "engine_dir": "build",
    "build_max_batch_size": "build.max_batch_size",
    "build_max_num_tokens": "build.max_num_tokens",
    "build_max_seq_len": "build.max_seq_len",
}


@dataclass(frozen=True)
class Owner:
    """An option labctl renders, and where it is rendered from."""

    flag: str  # as the engine file writes it
    where: KeyPath  # in the engine file
    field: str | None  # the profile field that sets it, if any


@dataclass(frozen=True)
class Owned:
    options: dict[str, Owner]  # every name of every owned option (normalised) -> its owner
    positional: Owner | None  # labctl renders the engine's positional (the model)


def _norm(name: str) -> str:
    return name.replace("_", "-")


def _placeholders(words: tuple[str, ...]) -> list[str]:
    return [n for word in words for _, n, _, _ in string.Formatter().parse(word) if n]


def _groups(engine: Engine) -> list[tuple[KeyPath, tuple[str, ...]]]:
    server = engine.server
    build = engine.build
    out: list[tuple[KeyPath, tuple[str, ...]]] = [(("server", "args", i), g) for i, g in enumerate(server.args)]
    out += [(("server", "thinking_off_args", i), g) for i, g in enumerate(server.thinking_off_args)]
    if build is not None:
        out += [(("build", "serve_args", i), g) for i, g in enumerate(build.serve_args)]
    if engine.auth.args:
        out.append((("auth", "args"), engine.auth.args))
    return out


def owned_options(engine: Engine, command: CommandContract | None) -> Owned:
    entry = len(command.argv0) - len(engine.server.entrypoint) if command else 0  # e.g. Atlas' `serve` word
    options: dict[str, Owner] = {}
    positional: Owner | None = None

    def own(name: str, owner: Owner) -> None:
        spec = command.option(name) if command else None
        for alias in spec.names if spec else (name,):
            options.setdefault(_norm(alias), owner)

    for where, group in _groups(engine):
        fields = [FIELD_OF[n] for n in _placeholders(group) if n in FIELD_OF]
        field = fields[0] if fields else None
        words = group[entry:] if where[:2] == ("server", "args") and where[2] == 0 else group
        if words and not words[0].startswith("-"):
            positional = positional or Owner(f"the positional argument {words[0]}", where, field)
        for word in words:
            if word.startswith("-") and not _placeholders((word,)):
                name = word.split("=", 1)[0]
                own(name, Owner(name, where, field))
    for i, name in enumerate(engine.server.owns):
        if positional is not None and name == "--model":  # vLLM copies its model positional into --model
            own(name, Owner(f"the model ({positional.flag})", positional.where, positional.field))
        else:
            own(name, Owner(name, ("server", "owns", i), None))
    options_file = engine.options_file
    if options_file is not None:  # a second file would replace labctl's (the engine reads the last one)
        own(options_file.flag, Owner(options_file.flag, ("options_file", "flag"), None))
    return Owned(options, positional)


def serve_command(engine: Engine, version: str | None) -> CommandContract | None:
    """The contract of the engine's serve command at this version; None when there is none to read."""
    ref = engine.contract
    if ref is None or version is None:
        return None
    try:
        path = contract_path(engine.source.path.parent.parent, engine.name, version)
    except BadInput:  # a bad version is the contract check's to refuse; match by name meanwhile
        return None
    if not path.is_file():
        return None
    return load_contract_cached(path).commands.get(ref.serve)


def _candidates(word: str, command: CommandContract | None, owned: Owned) -> list[str]:
    """Every owned option name the engine's parser could read this word as (wide on purpose)."""
    name = word.split("=", 1)[0]
    found = [_norm(name)]
    abbreviates = command is None or (command.parser == "argparse" and command.allow_abbrev)
    if name.startswith("--") and len(name) > 2 and abbreviates:
        found += [n for n in owned.options if n.startswith(_norm(name))]
    if not name.startswith("--") and len(name) >= 2:
        if len(word) > 2:
            found.append(word[:2])  # -p8000: a short option with its value attached
        if command is None or command.parser == "argparse":  # argparse abbreviates single-dash names too: -t, -tp
            found += [n for n in owned.options if not n.startswith("--") and n.startswith(name)]
    return [n for n in found if n in owned.options]


def _values(words: list[str], i: int, command: CommandContract | None) -> int:
    """How many words after words[i] are that option's values (so that they are not read as positionals)."""
    word = words[i]
    spec = command.option(word) if command is not None else None
    if (
        command is not None
        and spec is None
        and command.parser == "argparse"
        and command.allow_abbrev
        and word.startswith("--")
    ):
        specs = {o.names: o for o in command.options if any(n.startswith(word) for n in o.names)}
        spec = next(iter(specs.values())) if len(specs) == 1 else None
    if command is None or spec is None:  # no contract, or an option it refuses: the next word may be its value
        return 1 if i + 1 < len(words) and not words[i + 1].startswith("-") else 0
    if not spec.takes_value:
        return 0
    if command.parser == "click":  # click takes the next words, whatever they are
        return spec.nargs if isinstance(spec.nargs, int) else 1
    limit = spec.nargs if isinstance(spec.nargs, int) else 1 if spec.nargs in (None, "?") else len(words)
    count = 0
    while count < limit and i + 1 + count < len(words) and not words[i + 1 + count].startswith("-"):
        count += 1
    return count


def check_extra_args(engine: Engine, src: SourceFile, spec: dict[str, Any]) -> None:
    """Refuse an `extra_args` word that sets an option labctl renders (file, line, the flag, what to do)."""
    command = serve_command(engine, spec.get("engine_version"))
    owned = owned_options(engine, command)
    words: list[str] = list(spec["extra_args"])
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--" or not word.startswith("-") or word == "-":
            start = i + 1 if word == "--" else i
            if owned.positional is not None and start < len(words):
                _refuse_positional(engine, src, start, words[start], owned.positional)
            i += 1
            continue
        hits = _candidates(word, command, owned)
        if hits:
            _refuse(engine, src, i, word, owned.options[hits[0]])
        i += 1 + _values(words, i, command)


def _refuse(engine: Engine, src: SourceFile, index: int, word: str, owner: Owner) -> None:
    how = f"set the profile's {owner.field} instead" if owner.field else "labctl sets it itself"
    raise src.problem(
        ("extra_args", index),
        f"{word!r} sets {owner.flag}, which labctl renders ({engine.source.where(owner.where)}): {how}, "
        "and remove it from extra_args (the engine would take the last one, and the record would not say so).",
    )


def _refuse_positional(engine: Engine, src: SourceFile, index: int, word: str, owner: Owner) -> None:
    raise src.problem(
        ("extra_args", index),
        f"{word!r} would reach the engine as {owner.flag}, which labctl renders "
        f"({engine.source.where(owner.where)}): set the profile's {owner.field or 'model.id'} instead, and "
        "remove it from extra_args.",
    )
