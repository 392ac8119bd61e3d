"""Engine CLI contracts: which options an engine's own command line accepts, and a pure checker.

A contract (`engines/<engine>/cli/<version>.yaml`) is taken from the engine's own code: the
argparse parser of the exact PyPI wheel for vLLM and SGLang, the public source for TensorRT-LLM
(click) and Atlas (clap). `check_argv` replays the words after the command's `argv0` the way that
parser would, and says what the engine would do with each: refuse it (error), accept it with a
warning (deprecated option, abbreviation), or take it.

Pure: stdlib, labctl's hardened YAML reader and `labctl.errors` only; no engine is imported or run here.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl.catalog.sourcefile import load_yaml_data
from labctl.errors import BadInput

SCHEMA = 1
MAX_BYTES = 2 * 1024 * 1024
SPEAKER = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+()-]{0,39}")  # fullmatch; "TensorRT-LLM"
PARSERS = ("argparse", "click", "clap")
TYPES = ("str", "int", "float", "bool", "json")
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")  # fullmatch: `$` accepts a trailing newline
_NEGATIVE = re.compile(r"-[0-9]+|-[0-9]*\.[0-9]+")


@dataclass(frozen=True)
class OptionSpec:
    names: tuple[str, ...]
    takes_value: bool
    nargs: str | int | None = None
    type: str = "str"
    choices: tuple[str, ...] | None = None
    deprecated: str | None = None


@dataclass(frozen=True)
class CommandContract:
    argv0: tuple[str, ...]
    parser: str
    allow_abbrev: bool
    positionals: tuple[tuple[str, bool], ...]  # (name, required)
    options: tuple[OptionSpec, ...]
    exclusive: tuple[tuple[str, ...], ...] = ()
    requires: dict[str, tuple[str, ...]] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # option name -> the engine's message
    label: str = ""  # "vLLM 0.11.0": who is speaking in the findings

    def option(self, name: str) -> OptionSpec | None:
        for spec in self.options:
            if name in spec.names:
                return spec
        return None


@dataclass(frozen=True)
class Contract:
    engine: str
    version: str
    provenance: dict[str, Any]
    commands: dict[str, CommandContract]
    path: Path | None = None


@dataclass(frozen=True)
class Finding:
    level: str  # "error" | "warning"
    word_index: int | None  # index into the argv given to check_argv
    option: str | None
    message: str


# ------------------------------------------------------------------ loading


def contract_path(engines_dir: Path, engine: str, version: str) -> Path:
    if not SAFE_NAME.fullmatch(engine):
        raise BadInput(f"engine name {engine!r} is not a plain name")
    if not SAFE_NAME.fullmatch(version):
        raise BadInput(f"engine version {version!r} is not a plain version string")
    return Path(engines_dir) / engine / "cli" / f"{version}.yaml"


class Malformed(Exception):
    """A contract file that does not have the shape it must (the caller says which file, in one line)."""


def check_keys(d: Any, where: str, required: set[str], optional: AbstractSet[str] = frozenset()) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise Malformed(f"{where}: expected a mapping")
    missing = required - d.keys()
    if missing:
        raise Malformed(f"{where}: missing {', '.join(sorted(missing))}")
    extra = d.keys() - required - optional
    if extra:
        raise Malformed(f"{where}: unknown key(s) {', '.join(sorted(map(str, extra)))}")
    return d


def _str_list(v: Any, where: str, *, empty: bool = False) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v) or (not v and not empty):
        raise Malformed(f"{where}: expected a list of strings")
    return tuple(v)


def _option(d: Any, where: str) -> OptionSpec:
    d = check_keys(d, where, {"names", "takes_value"}, {"nargs", "type", "choices", "deprecated"})
    names = _str_list(d["names"], f"{where}.names")
    if not all(n.startswith("-") for n in names):
        raise Malformed(f"{where}.names: option names start with '-'")
    takes = d["takes_value"]
    if not isinstance(takes, bool):
        raise Malformed(f"{where}.takes_value: expected true or false")
    nargs = d.get("nargs")
    if not (nargs in (None, "?", "*", "+") or (isinstance(nargs, int) and not isinstance(nargs, bool) and nargs >= 1)):
        raise Malformed(f"{where}.nargs: null, '?', '*', '+' or a positive integer")
    typ = d.get("type") or ("str" if takes else "bool")
    if typ not in TYPES:
        raise Malformed(f"{where}.type: one of {', '.join(TYPES)}")
    choices = d.get("choices")
    if choices is not None:
        choices = _str_list([str(c) for c in choices] if isinstance(choices, list) else choices, f"{where}.choices")
    dep = d.get("deprecated")
    if dep is not None and not isinstance(dep, str):
        raise Malformed(f"{where}.deprecated: null or the engine's warning text")
    return OptionSpec(names, takes, nargs if takes else None, typ, choices, dep)


def _command(d: Any, where: str, label: str) -> CommandContract:
    d = check_keys(
        d, where, {"argv0", "parser", "options"}, {"allow_abbrev", "positionals", "exclusive", "requires", "rejected"}
    )
    argv0 = _str_list(d["argv0"], f"{where}.argv0")
    if d["parser"] not in PARSERS:
        raise Malformed(f"{where}.parser: one of {', '.join(PARSERS)}")
    abbrev = d.get("allow_abbrev", False)
    if not isinstance(abbrev, bool):
        raise Malformed(f"{where}.allow_abbrev: expected true or false")
    if abbrev and d["parser"] != "argparse":
        raise Malformed(f"{where}.allow_abbrev: only argparse abbreviates options")
    pos = []
    for i, p in enumerate(d.get("positionals") or []):
        p = check_keys(p, f"{where}.positionals[{i}]", {"name", "required"})
        if not isinstance(p["name"], str) or not isinstance(p["required"], bool):
            raise Malformed(f"{where}.positionals[{i}]: name (string) and required (true/false)")
        pos.append((p["name"], p["required"]))
    if not isinstance(d["options"], list):
        raise Malformed(f"{where}.options: expected a list")
    options = tuple(_option(o, f"{where}.options[{i}]") for i, o in enumerate(d["options"]))
    known = {n for o in options for n in o.names}
    seen: set[str] = set()
    for o in options:
        for n in o.names:
            if n in seen:
                raise Malformed(f"{where}.options: {n} is listed twice")
            seen.add(n)

    def must_know(name: str, what: str) -> str:
        if name not in known:
            raise Malformed(f"{where}.{what}: {name} is not among the options")
        return name

    excl_raw = d.get("exclusive") or []
    if not isinstance(excl_raw, list):
        raise Malformed(f"{where}.exclusive: expected a list of option-name lists")
    exclusive = tuple(
        tuple(must_know(n, "exclusive") for n in _str_list(g, f"{where}.exclusive[{i}]"))
        for i, g in enumerate(excl_raw)
    )
    req_raw = d.get("requires") or {}
    if not isinstance(req_raw, dict):
        raise Malformed(f"{where}.requires: expected a mapping of option -> [options]")
    requires = {
        must_know(k, "requires"): tuple(must_know(n, "requires") for n in _str_list(v, f"{where}.requires.{k}"))
        for k, v in req_raw.items()
    }
    rejected: dict[str, str] = {}
    rej_raw = d.get("rejected") or []
    if not isinstance(rej_raw, list):
        raise Malformed(f"{where}.rejected: expected a list")
    for i, r in enumerate(rej_raw):
        r = check_keys(r, f"{where}.rejected[{i}]", {"option", "reason"})
        if not isinstance(r["option"], str) or not isinstance(r["reason"], str) or not r["reason"]:
            raise Malformed(f"{where}.rejected[{i}]: option and reason are strings")
        rejected[must_know(r["option"], "rejected")] = r["reason"]
    return CommandContract(argv0, d["parser"], abbrev, tuple(pos), options, exclusive, requires, rejected, label)


def load_contract(path: Path) -> Contract:
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise BadInput(f"{path}: cannot read the engine contract ({e.strerror})") from None
    if size > MAX_BYTES:
        raise BadInput(f"{path}: engine contract is {size} bytes, more than {MAX_BYTES}")
    doc = load_yaml_data(path, max_bytes=MAX_BYTES)
    try:
        doc = check_keys(doc, "contract", {"schema", "engine", "version", "provenance", "commands"}, {"speaker"})
        if doc["schema"] != SCHEMA:
            raise Malformed(f"schema: expected {SCHEMA}, found {doc['schema']!r}")
        engine, version = doc["engine"], doc["version"]
        if not isinstance(engine, str) or not SAFE_NAME.fullmatch(engine):
            raise Malformed("engine: the engine folder's name")
        if not isinstance(version, str) or not SAFE_NAME.fullmatch(version):
            raise Malformed("version: a quoted version string")
        prov = doc["provenance"]
        if not isinstance(prov, dict) or prov.get("kind") not in ("pypi-wheel", "source"):
            raise Malformed("provenance.kind: pypi-wheel or source")
        if prov["kind"] == "pypi-wheel":
            check_keys(
                prov,
                "provenance",
                {"kind", "package", "version", "wheel", "wheel_sha256"},
                {"extracted_with", "regenerate", "note"},
            )
            if not re.fullmatch(r"[0-9a-f]{64}", str(prov["wheel_sha256"])):
                raise Malformed("provenance.wheel_sha256: 64 hex digits")
        else:
            check_keys(
                prov,
                "provenance",
                {"kind", "repo", "commit", "paths", "note"},
                {"version", "extracted_with", "regenerate"},
            )
            if not re.fullmatch(r"[0-9a-f]{40}", str(prov["commit"])):
                raise Malformed("provenance.commit: 40 hex digits")
        cmds = doc["commands"]
        if not isinstance(cmds, dict) or not cmds:
            raise Malformed("commands: at least one command")
        speaker = doc.get("speaker", engine)
        if not isinstance(speaker, str) or not SPEAKER.fullmatch(speaker):
            raise Malformed("speaker: how the engine's messages name it, e.g. vLLM (40 characters at most)")
        label = f"{speaker} {version}"
        commands = {str(k): _command(v, f"commands.{k}", label) for k, v in cmds.items()}
    except Malformed as e:
        raise BadInput(f"{path}: bad engine contract: {e}") from None
    return Contract(engine, version, dict(prov), commands, path)


def load_contract_cached(path: Path) -> Contract:
    """A contract is large (hundreds of options) and immutable: each file version is parsed once per process."""
    return _load_cached(Path(path), Path(path).stat().st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _load_cached(path: Path, mtime_ns: int) -> Contract:
    return load_contract(path)


# ------------------------------------------------------------------ checking


def _convert(typ: str, value: str) -> bool:
    try:
        if typ == "int":
            int(value)
        elif typ == "float":
            float(value)
        elif typ == "json":
            json.loads(value)
        elif typ == "bool":
            return value in ("true", "false")
    except ValueError:
        return False
    return True


class _Checker:
    def __init__(self, cmd: CommandContract) -> None:
        self.cmd = cmd
        self.who = cmd.label or "the engine"
        self.findings: list[Finding] = []
        self.long = sorted(n for o in cmd.options for n in o.names)

    def error(self, i: int | None, opt: str | None, msg: str) -> None:
        self.findings.append(Finding("error", i, opt, msg))

    def warn(self, i: int | None, opt: str | None, msg: str) -> None:
        self.findings.append(Finding("warning", i, opt, msg))

    def looks_like_option(self, word: str) -> bool:
        if not word.startswith("-") or word == "-":
            return False
        if self.cmd.parser == "click":
            return False  # click takes the next word as the value, whatever it is
        if _NEGATIVE.fullmatch(word) and not any(_NEGATIVE.fullmatch(n) for n in self.long):
            return False
        # argparse reads a word with a space and no known option before '=' as a value, not an option
        return not (self.cmd.parser == "argparse" and " " in word and self.cmd.option(word.split("=", 1)[0]) is None)

    def resolve(self, i: int, name: str) -> tuple[OptionSpec | None, str]:
        spec = self.cmd.option(name)
        if spec is not None:
            return spec, name
        if self.cmd.parser == "argparse" and self.cmd.allow_abbrev and name.startswith("--"):
            hits = [n for n in self.long if n.startswith(name)]
            if len(hits) == 1:
                self.warn(
                    i,
                    hits[0],
                    f"{name} is taken by {self.who} as an abbreviation of {hits[0]}; write {hits[0]} in full",
                )
                return self.cmd.option(hits[0]), hits[0]
            if len(hits) > 1:
                shown = ", ".join(hits[:6]) + (", …" if len(hits) > 6 else "")
                self.error(i, name, f"{self.who} refuses {name}: ambiguous option, could match {shown}")
                return None, ""
        self.error(i, name, self._unknown(name))
        return None, ""

    def _unknown(self, name: str) -> str:
        what = {"argparse": "unrecognized arguments", "click": "No such option", "clap": "unexpected argument"}[
            self.cmd.parser
        ]
        return f"{self.who} does not know the option {name} ({what}: exits with status 2)"

    def check_values(self, i: int, canon: str, spec: OptionSpec, values: list[str]) -> None:
        for v in values:
            if not _convert(spec.type, v):
                self.error(i, canon, f"{self.who} refuses {canon} {v!r}: not a valid {spec.type}")
            elif spec.choices is not None and v not in spec.choices:
                shown = ", ".join(spec.choices[:12]) + (", …" if len(spec.choices) > 12 else "")
                self.error(i, canon, f"{self.who} refuses {canon} {v!r}: invalid choice (choose from {shown})")

    def run(self, argv: list[str]) -> list[Finding]:
        cmd = self.cmd
        seen: dict[str, int] = {}
        positionals: list[tuple[int, str]] = []
        i, n = 0, len(argv)
        while i < n:
            word = argv[i]
            if word == "--":
                positionals.extend((j, argv[j]) for j in range(i + 1, n))
                break
            if not (word.startswith("-") and word != "-" and (cmd.parser == "click" or self.looks_like_option(word))):
                positionals.append((i, word))
                i += 1
                continue
            name, inline = word, None
            if word.startswith("--") and "=" in word:
                name, inline = word.split("=", 1)
            if inline is None and not word.startswith("--") and cmd.option(word) is None and len(word) > 2:
                # -qfp8: a short option with its value attached (argparse, click, clap alike)
                short = cmd.option(word[:2])
                if short is not None and short.takes_value:
                    name, inline = word[:2], word[2:]
            spec, canon = self.resolve(i, name)
            if spec is None:
                i += 1
                continue
            for alias in spec.names:
                seen.setdefault(alias, i)
            if not spec.takes_value:
                if inline is not None:
                    self.error(i, canon, f"{self.who} refuses {word}: {canon} takes no value")
                i += 1
            else:
                i = self.take_values(i, argv, canon, spec, inline)
            reason = next((cmd.rejected[a] for a in (canon, *spec.names) if a in cmd.rejected), None)
            if reason is not None:
                self.error(seen[canon], canon, f'{self.who} rejects {canon}: "{reason}"')
            elif spec.deprecated:
                self.warn(seen[canon], canon, f'{self.who} warns about {canon}: "{spec.deprecated}"')
        self.check_positionals(positionals)
        self.check_relations(seen)
        return self.findings

    def take_values(self, i: int, argv: list[str], canon: str, spec: OptionSpec, inline: str | None) -> int:
        if inline is not None:
            if spec.nargs in (None, "?", "*", "+", 1):
                self.check_values(i, canon, spec, [inline])
            else:
                self.error(i, canon, f"{self.who} refuses {canon}=…: it expects {spec.nargs} arguments")
            return i + 1
        j = i + 1
        if self.cmd.parser == "click":  # click takes the next word, whatever it is
            count = spec.nargs if isinstance(spec.nargs, int) else 1
            taken = argv[j : j + count]
            if len(taken) < count:
                self.error(i, canon, f"{self.who} refuses {canon}: it requires an argument")
            self.check_values(i, canon, spec, taken)
            return j + len(taken)
        vals: list[str] = []
        while j < len(argv) and not self.looks_like_option(argv[j]) and argv[j] != "--":
            vals.append(argv[j])
            j += 1
            if spec.nargs in (None, "?") or (isinstance(spec.nargs, int) and len(vals) == spec.nargs):
                break
        want: str | None = None
        if spec.nargs is None and not vals:
            want = "one argument"
        elif spec.nargs == "+" and not vals:
            want = "at least one argument"
        elif isinstance(spec.nargs, int) and len(vals) < spec.nargs:
            want = f"{spec.nargs} arguments"
        if want:
            self.error(i, canon, f"{self.who} refuses {canon} without a value: expected {want}")
        self.check_values(i, canon, spec, vals)
        return j

    def check_positionals(self, positionals: list[tuple[int, str]]) -> None:
        slots = self.cmd.positionals
        for k, (name, required) in enumerate(slots):
            if required and k >= len(positionals):
                self.error(None, None, f"{self.who} needs the argument {name.upper()} (missing: exits with status 2)")
        for idx, word in positionals[len(slots) :]:
            what = {
                "argparse": "unrecognized arguments",
                "click": "unexpected extra argument",
                "clap": "unexpected argument",
            }[self.cmd.parser]
            self.error(idx, None, f"{self.who} refuses the extra word {word!r} ({what}: exits with status 2)")

    def check_relations(self, seen: dict[str, int]) -> None:
        for group in self.cmd.exclusive:
            present = [g for g in group if g in seen]
            if len(present) > 1:
                self.error(
                    seen[present[1]],
                    present[1],
                    f"{self.who} refuses {present[1]} together with {present[0]} (mutually exclusive)",
                )
        for opt, needs in self.cmd.requires.items():
            if opt in seen and not any(nd in seen for nd in needs):
                self.error(seen[opt], opt, f"{self.who} refuses {opt} without {' or '.join(needs)}")


def check_argv(command: CommandContract, argv: list[str]) -> list[Finding]:
    """What the engine's parser would do with these words (the words after `argv0`)."""
    return _Checker(command).run(list(argv))


def has_errors(findings: list[Finding]) -> bool:
    return any(f.level == "error" for f in findings)
