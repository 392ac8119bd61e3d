"""An engine's command line as that engine's own parser sees it: the words checked against the engine
version's CLI contract (`labctl.catalog.contracts`), the values read out of them, and a refusal
printed the way that parser prints it (argparse, click or clap) with the engine's exit status.

Used only by the harness personas; the contract module is imported lazily by the caller so that the
plain harness stays standard-library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from labctl.catalog.contracts import CommandContract, Finding, OptionSpec, check_argv


class EngineExit(Exception):
    """The engine would stop here: `stderr` is what it prints, `code` its exit status."""

    def __init__(self, stderr: str, code: int) -> None:
        super().__init__(stderr)
        self.stderr = stderr
        self.code = code


@dataclass
class ParsedArgv:
    """Option values keyed by every name of the option (so any alias finds them), and positionals."""

    values: dict[str, list[str]] = field(default_factory=dict)
    positionals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    by_option: dict[str, list[str]] = field(default_factory=dict)  # keyed by each option's first name
    spelled: dict[str, str] = field(default_factory=dict)  # keyed by each option's first name: the name given last

    def get(self, *names: str) -> str | None:
        for name in names:
            if name in self.values:
                return self.values[name][-1] if self.values[name] else "true"
        return None

    def all(self, *names: str) -> list[str]:
        for name in names:
            if name in self.values:
                return list(self.values[name])
        return []

    def has(self, *names: str) -> bool:
        return any(name in self.values for name in names)

    def switched_on(self, name: str) -> bool:
        """A --X/--no-X (or --enable-X/--disable-X) switch, by its first name: on when its positive name came last."""
        given = self.spelled.get(name)
        return given is not None and not given.startswith(("--no-", "--disable-"))


@dataclass(frozen=True)
class Voice:
    """How an engine's parser introduces itself when it refuses a command line."""

    prog: str  # argparse: the prog in "PROG: error: …"; click/clap: the command in the usage line
    usage: str  # the usage line, without its "usage: " / "Usage: " prefix


def parse_engine_argv(cmd: CommandContract, argv: list[str], voice: Voice) -> ParsedArgv:
    """Check argv (the words after `cmd.argv0`) against the contract, refuse like the engine when its
    parser would, and otherwise return the values it would read."""
    findings = check_argv(cmd, argv)
    errors = [f for f in findings if f.level == "error"]
    if errors:
        raise refusal(cmd, errors[0], voice)
    parsed = _read_values(cmd, argv)
    parsed.warnings = [f.message for f in findings if f.level == "warning"]
    return parsed


def _resolve(cmd: CommandContract, name: str) -> OptionSpec | None:
    spec = cmd.option(name)
    if spec is None and cmd.parser == "argparse" and cmd.allow_abbrev and name.startswith("--"):
        hits = [o for o in cmd.options if any(n.startswith(name) for n in o.names)]
        if len(hits) == 1:
            spec = hits[0]
    return spec


def _looks_like_option(word: str) -> bool:
    return word.startswith("-") and word != "-" and not re.fullmatch(r"-\d+(\.\d*)?|-\.\d+", word)


def _read_values(cmd: CommandContract, argv: list[str]) -> ParsedArgv:
    """The values of an argv the checker accepted (so every option resolves)."""
    out = ParsedArgv()
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            out.positionals += argv[i + 1 :]
            break
        is_option = _looks_like_option(word)
        if cmd.parser == "argparse" and " " in word and cmd.option(word.split("=", 1)[0]) is None:
            is_option = False
        if not is_option:
            out.positionals.append(word)
            i += 1
            continue
        name, inline = word, None
        if word.startswith("--") and "=" in word:
            name, inline = word.split("=", 1)
        spec = _resolve(cmd, name)
        if spec is None and len(word) > 2 and not word.startswith("--"):
            spec, inline = cmd.option(word[:2]), word[2:]
        if spec is None:
            i += 1
            continue
        values: list[str] = []
        i += 1
        if not spec.takes_value:
            values = ["true"]
        elif inline is not None:
            values = [inline]
        elif cmd.parser == "click":
            count = spec.nargs if isinstance(spec.nargs, int) else 1
            values, i = argv[i : i + count], i + count
        else:
            while i < len(argv) and not _looks_like_option(argv[i]):
                values.append(argv[i])
                i += 1
                if spec.nargs in (None, "?") or (isinstance(spec.nargs, int) and len(values) == spec.nargs):
                    break
        for alias in spec.names:
            out.values[alias] = values
        out.by_option[spec.names[0]] = values
        out.spelled[spec.names[0]] = (
            name if name in spec.names else next((n for n in spec.names if n.startswith(name)), name)
        )
    return out


# ------------------------------------------------------------------ refusals, in each parser's words

_UNKNOWN = re.compile(r"does not know the option (\S+)")
_CHOICE = re.compile(r"refuses (\S+) '(.*)': invalid choice \(choose from (.*)\)$")
_TYPE = re.compile(r"refuses (\S+) '(.*)': not a valid (\w+)$")
_NO_VALUE = re.compile(r"refuses (\S+) without a value: expected (.*)$")
_AMBIGUOUS = re.compile(r"refuses (\S+): ambiguous option, could match (.*)$")
_EXTRA = re.compile(r"refuses the extra word '(.*)' \(")
_MISSING = re.compile(r"needs the argument (\S+)")
_EXCLUSIVE = re.compile(r"refuses (\S+) together with (\S+)")
_NEEDS = re.compile(r"refuses (\S+) without (.*)$")
_TYPE_WORDS = {"int": "int", "float": "float", "json": "loads", "bool": "bool"}


def refusal(cmd: CommandContract, finding: Finding, voice: Voice) -> EngineExit:
    opt = finding.option
    if opt is not None and opt in cmd.rejected:
        # Python engines reject these after parsing, with a ValueError (vLLM 0.11.0's --model): status 1.
        return EngineExit(
            "Traceback (most recent call last):\n  (engine traceback elided by the labctl persona)\n"
            f"ValueError: {cmd.rejected[opt]}\n",
            1,
        )
    text = finding.message
    if cmd.parser == "click":
        return EngineExit(_click(text, voice), 2)
    if cmd.parser == "clap":
        return EngineExit(_clap(text, voice), 2)
    return EngineExit(f"usage: {voice.usage}\n{voice.prog}: error: {_argparse(text)}\n", 2)


def _argparse(text: str) -> str:
    if m := _UNKNOWN.search(text):
        return f"unrecognized arguments: {m[1]}"
    if m := _CHOICE.search(text):
        shown = ", ".join(f"'{c.strip()}'" for c in m[3].split(",") if c.strip() != "…")
        return f"argument {m[1]}: invalid choice: '{m[2]}' (choose from {shown})"
    if m := _TYPE.search(text):
        return f"argument {m[1]}: invalid {_TYPE_WORDS.get(m[3], m[3])} value: '{m[2]}'"
    if m := _NO_VALUE.search(text):
        return f"argument {m[1]}: expected {m[2]}"
    if m := _AMBIGUOUS.search(text):
        return f"ambiguous option: {m[1]} could match {m[2]}"
    if m := _EXTRA.search(text):
        return f"unrecognized arguments: {m[1]}"
    if m := _MISSING.search(text):
        return f"the following arguments are required: {m[1].lower()}"
    if m := _EXCLUSIVE.search(text):
        return f"argument {m[1]}: not allowed with argument {m[2]}"
    return text


def _click(text: str, voice: Voice) -> str:
    if m := _UNKNOWN.search(text):
        error = f"No such option: {m[1]}"
    elif m := _CHOICE.search(text):
        error = f"Invalid value for '{m[1]}': '{m[2]}' is not one of {m[3]}."
    elif m := _TYPE.search(text):
        kind = {"int": "integer", "float": "float"}.get(m[3], m[3])
        error = f"Invalid value for '{m[1]}': '{m[2]}' is not a valid {kind}."
    elif m := re.search(r"refuses (\S+): it requires an argument", text):
        error = f"Option '{m[1]}' requires an argument."
    elif m := _EXTRA.search(text):
        error = f"Got unexpected extra argument ({m[1]})"
    elif m := _MISSING.search(text):
        error = f"Missing argument '{m[1]}'."
    else:
        error = text
    return f"Usage: {voice.usage}\nTry '{voice.prog} --help' for help.\n\nError: {error}\n"


def _clap(text: str, voice: Voice) -> str:
    if (m := _UNKNOWN.search(text)) or (m := _EXTRA.search(text)):
        error = f"unexpected argument '{m[1]}' found"
    elif m := _TYPE.search(text):
        error = f"invalid value '{m[2]}' for '{m[1]}': invalid {m[3]}"
    elif m := _CHOICE.search(text):
        error = f"invalid value '{m[2]}' for '{m[1]}'"
    elif m := _NO_VALUE.search(text):
        error = f"a value is required for '{m[1]}' but none was supplied"
    elif m := _EXCLUSIVE.search(text):
        error = f"the argument '{m[1]}' cannot be used with '{m[2]}'"
    elif m := _NEEDS.search(text):
        error = f"the following required arguments were not provided: {m[2]}"
    else:
        error = text
    return f"error: {error}\n\nUsage: {voice.usage}\n\nFor more information, try '--help'.\n"
