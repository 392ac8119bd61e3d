"""The rendered command line, checked against the CLI contract of the engine version the profile pins
(engines/<engine>/cli/<version>.yaml), before anything starts. A refusal names the line the word came
from: the profile's extra_args, or the engine.yaml argument group."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from labctl.catalog.contracts import CommandContract, Contract, check_argv, contract_path, load_contract_cached
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile
from labctl.compose.render import ENGINE_STORE_TARGET, SECRETS_TARGET, Word, build_key, build_service, serve_command
from labctl.errors import BadInput


@dataclass(frozen=True)
class Verdict:
    profile: str
    contract: str | None  # the contract file, relative to the lab; None: no contract applies
    findings: tuple[str, ...]  # errors, each naming file:line, the option and the version
    warnings: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.findings


def find_contract(profile: Profile) -> Contract | None:
    """The contract of the profile's engine version; None for an engine without contracts (labctl's own)."""
    engine = profile.engine
    version = profile.engine_version
    if engine.contract is None or version is None:
        return None
    path = contract_path(engine.source.path.parent.parent, engine.name, version)
    return load_contract_cached(path) if path.is_file() else None


def check_profile(profile: Profile, resident: bool = False, allow_uncontracted: bool = False) -> Verdict:
    engine = profile.engine
    name = profile.source.name if profile.source else f"{engine.name}/{profile.name}"
    if engine.contract is None:
        return Verdict(name, None, (), ())
    version = profile.engine_version
    contract = find_contract(profile)
    if contract is None:
        message = (
            f"{name}: no CLI contract for {engine.name} {version} (engines/{engine.name}/cli/{version}.yaml): its "
            "command line cannot be checked. Generate one (make contracts ENGINE=… VERSION=…), pin a version that "
            "has one, or pass --allow-uncontracted (recorded)."
        )
        return Verdict(name, None, () if allow_uncontracted else (message,), (message,) if allow_uncontracted else ())
    key_file = f"{SECRETS_TARGET}/api_key" if resident else None
    serve = serve_command(profile, key_file)
    findings: list[str] = []
    warnings: list[str] = []
    for command_name, words in _commands(profile, serve.entrypoint, serve.argv + serve.auth_argv, contract):
        command = contract.commands.get(command_name)
        if command is None:
            findings.append(f"{name}: the contract {Path(str(contract.path)).name} has no command {command_name!r}.")
            continue
        errors, notes = _check(profile, name, contract, command, words)
        findings += errors
        warnings += notes
    rel = f"engines/{engine.name}/cli/{Path(str(contract.path)).name}"
    return Verdict(name, rel, tuple(findings), tuple(warnings))


def refuse_unless_valid(verdict: Verdict) -> None:
    if not verdict.ok:
        raise BadInput(
            verdict.findings[0] + (f" (and {len(verdict.findings) - 1} more)" if verdict.findings[1:] else "")
        )


def _commands(
    profile: Profile, entrypoint: list[str], argv: list[Word], loaded: Contract
) -> list[tuple[str, list[Word]]]:
    contract = profile.engine.contract
    assert contract is not None  # checked by the caller: an engine without contracts has nothing to check
    head = [Word(word, "server.entrypoint") for word in entrypoint]
    out = [(contract.serve, head + argv)]
    if profile.build and contract.build:
        build = loaded.commands.get(contract.build)
        out.append((contract.build, _build_argv(profile, build.argv0[0]) if build and build.argv0 else []))
    return out


def _build_argv(profile: Profile, tool: str) -> list[Word]:
    """The build tool's command line inside the build script (the line that runs the contract's build
    command, e.g. trtllm-build), with the script's positional parameters filled in as the build service
    passes them."""
    engine_dir = f"{ENGINE_STORE_TARGET}/{build_key(profile)}"
    service = build_service(profile, engine_dir)
    values = service["command"]
    engine_build = profile.engine.build
    for line in (engine_build.script if engine_build else "").splitlines():
        words = shlex.split(line)
        if words and words[0].startswith(tool):
            return [Word(_fill(word, values), "build.script") for word in words]
    return []


def _fill(word: str, values: list[str]) -> str:
    return re.sub(r"\$\{?([0-9]+)\}?", lambda m: values[int(m.group(1)) - 1], word)


def _check(
    profile: Profile, name: str, contract: Contract, command: CommandContract, words: list[Word]
) -> tuple[list[str], list[str]]:
    label = f"{profile.engine.title} {contract.version}"
    texts = [w.text for w in words]
    start = len(command.argv0)
    if texts[:start] != list(command.argv0):
        where = _where(profile, words[0].origin if words else "server.entrypoint")
        return [
            f"{name}: {where}: the command starts {' '.join(texts[:start])!r}, but {label} is started as "
            f"{' '.join(command.argv0)!r} ({Path(str(contract.path)).name})."
        ], []
    rest = words[start:]
    errors: list[str] = []
    notes: list[str] = []
    for finding in check_argv(command, [w.text for w in rest]):
        origin = rest[finding.word_index].origin if finding.word_index is not None else "server.args"
        text = f"{name}: {_where(profile, origin)}: {finding.message} [contract {Path(str(contract.path)).name}]"
        (errors if finding.level == "error" else notes).append(text)
    return errors, notes


def _where(profile: Profile, origin: str) -> str:
    """`server.args[3]` -> `engines/vllm/engine.yaml:16`; `extra_args[1]` -> the profile's line."""
    parts = tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\[\]]+", origin) if p)
    if parts and parts[0] == "extra_args" and profile.source is not None:
        return f"{profile.source.name}:{profile.source.lines.get(parts, profile.source.lines.get(parts[:1], 0))}"
    source = profile.engine.source
    line = source.lines.get(parts) or source.lines.get(parts[:2]) or source.lines.get(parts[:1]) or 0
    return f"{source.name}:{line} ({origin})"


def with_gpus(profile: Profile, count: int) -> Profile:
    """The same profile on `count` GPUs, as `labctl up --gpus` would place it (for checks and tests)."""
    spec = dict(profile.spec)
    spec["gpus"] = {"device_ids": [str(i) for i in range(count)]}
    return replace(profile, spec=spec)


def validate_lab(
    lab: Lab, engine: str | None, profile: str | None, allow_unsupported: bool, allow_uncontracted: bool
) -> list[str]:
    """`labctl validate`: every engine file and profile, and each profile's command line (plain and
    resident) against its contract. Returns one line per profile; the first refusal raises."""
    from labctl.catalog.engines import list_engine_names, load_engine
    from labctl.catalog.fit import default_target, fit
    from labctl.catalog.profiles import list_profile_names, load_profile

    if profile and not engine:
        raise BadInput("--profile needs an engine: labctl validate ENGINE --profile NAME.")
    lines = []
    for engine_name in [engine] if engine else list_engine_names(lab):
        load_engine(lab, engine_name)
        for name in [profile] if profile else list_profile_names(lab, engine_name):
            loaded = load_profile(lab, engine_name, name, allow_unsupported=allow_unsupported)
            verdicts = [check_profile(loaded, resident, allow_uncontracted) for resident in (False, True)]
            for verdict in verdicts:
                refuse_unless_valid(verdict)
            first = verdicts[0]
            against = f"valid against {first.contract}" if first.contract else "valid (no external CLI contract)"
            lines.append(f"{engine_name}/{name}: {against}")
            lines += [f"  warning: {w}" for w in sorted({w for v in verdicts for w in v.warnings})]
            estimate = fit(loaded, default_target(loaded))
            if estimate is not None:
                lines += [f"  {line}" for line in estimate.lines()]
                lines += [f"  way out: {way}" for way in ([] if estimate.fits else estimate.ways_out())]
    return lines
