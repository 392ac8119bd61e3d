"""YAML files read with their line numbers, so that every complaint can name file, field and line.

Every file comes from someone else, so it is read as hostile data: bounded in size, plain data only
(text, numbers, true/false, null, lists and mappings with text keys), no anchors or aliases (an alias
bomb expands a few KiB into billions of nodes), nesting bounded."""

from __future__ import annotations

import copy
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from labctl.errors import BadInput

KeyPath = tuple[str | int, ...]
# libyaml's safe loader when PyYAML has it (several times faster), else the pure-Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# A profile, engine file, workload or suite is a few KiB; a thousand times that is no honest file.
MAX_BYTES = 1024 * 1024
# Deeper than any labctl file needs (a suite's JSON schema nests ~5), and far below the recursion limit.
MAX_DEPTH = 32
_PLAIN = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_PLAIN + t for t in ("str", "int", "float", "bool", "null")}
_COLLECTION_TAGS = {_PLAIN + "seq", _PLAIN + "map"}
_TAG_WORDS = {"timestamp": "a timestamp (a date or time)", "binary": "binary data", "set": "a set"}


@dataclass(frozen=True)
class SourceFile:
    """A parsed YAML mapping plus where each key stands in the file."""

    path: Path
    data: dict[str, Any]
    lines: dict[KeyPath, int] = field(default_factory=dict)
    display: str = ""
    prefix: KeyPath = ()  # where this mapping sits in its file (an export's setup.resolved_profile)

    @property
    def name(self) -> str:
        return self.display or str(self.path)

    def where(self, key: KeyPath) -> str:
        """`file:line: a.b.c` for a field, falling back to the nearest parent that has a line."""
        full = (*self.prefix, *key)
        for n in range(len(key), -1, -1):
            line = self.lines.get(key[:n])
            if line:
                return f"{self.name}:{line}: {dotted(full)}" if full else f"{self.name}:{line}"
        return f"{self.name}: {dotted(full)}" if full else self.name

    def problem(self, key: KeyPath, text: str) -> BadInput:
        return BadInput(f"{self.where(key)}: {text}")


def dotted(key: KeyPath) -> str:
    out = ""
    for part in key:
        name = str(part) if str(part).isprintable() else repr(part)  # a key from the file stays one line
        out += f"[{part}]" if isinstance(part, int) else (f".{name}" if out else name)
    return out


def read_bounded(path: Path, name: str, max_bytes: int = MAX_BYTES) -> bytes:
    """A regular file's bytes, refused beyond `max_bytes`; FIFOs and devices are never opened for a read
    that could block or never end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BadInput(f"{name}: file not found.") from None
    except OSError as exc:
        raise BadInput(f"{name}: cannot be read ({exc.strerror}).") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInput(f"{name}: not a regular file (a directory, FIFO, device or socket); give a file.")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise BadInput(
            f"{name}: larger than {max_bytes // 1024} KiB, the most labctl reads from such a file; "
            "this is not a file labctl wrote or a person typed."
        )
    return data


def load_yaml_mapping(path: Path, display: str = "", max_bytes: int = MAX_BYTES) -> SourceFile:
    name = display or str(path)
    return parse_yaml_mapping(_decode(read_bounded(path, name, max_bytes), name), path, name)


def load_yaml_data(path: Path, display: str = "", max_bytes: int = MAX_BYTES) -> Any:
    """Any top-level value (for files whose own loader checks the shape), with the same defences."""
    name = display or str(path)
    return parse_yaml(_decode(read_bounded(path, name, max_bytes), name), name, {})


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{name}: not UTF-8 text.") from None


def parse_yaml_mapping(text: str, path: Path, display: str = "") -> SourceFile:
    name = display or str(path)
    if not text.strip():
        raise BadInput(
            f"{name}: the file is empty; it must be a YAML mapping of its fields (copy a shipped one to start)."
        )
    lines: dict[KeyPath, int] = {}
    data = parse_yaml(text, name, lines)
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise BadInput(f"{name}: expected a YAML mapping of fields at the top level, found {kind}.")
    return SourceFile(path=path, data=data, lines=lines, display=name)


def parse_yaml(text: str, name: str, lines: dict[KeyPath, int]) -> Any:
    """Plain data from YAML text, refusing what could hang or exhaust labctl; fills `lines` as it goes."""
    cached = _PARSED.get(text)
    if cached is None:
        found: dict[KeyPath, int] = {}
        cached = (_parse(text, name, found), found)  # a refusal raises: never cached
        with _PARSED_LOCK:
            _PARSED[text] = cached
            while len(_PARSED) > _PARSED_MAX:
                del _PARSED[next(iter(_PARSED))]
    data, found = cached
    lines.update(found)
    return copy.deepcopy(data)  # each caller owns its copy: a cached value must never change under another


# A long-running study or test process reads the same engine contracts (up to ~300 KiB each) again and again,
# from any folder: the parse depends on the text alone (the file's name only ever appears in a refusal).
_PARSED: dict[str, tuple[Any, dict[KeyPath, int]]] = {}
_PARSED_MAX = 32
_PARSED_LOCK = threading.Lock()


def _parse(text: str, name: str, lines: dict[KeyPath, int]) -> Any:
    try:
        check_events(text, name)
        loader = _LOADER(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _collect_lines(node, (), lines, name)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise BadInput(f"{name}{line}: YAML syntax error: {exc.problem or exc}. Fix the file and try again.") from None
    except yaml.YAMLError as exc:
        raise BadInput(f"{name}: YAML error: {str(exc)[:200]}.") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise BadInput(f"{name}: a number labctl cannot read ({str(exc)[:120]}); use a smaller number.") from None


def check_events(text: str, name: str) -> None:
    """Anchors, aliases and depth, from the event stream: before any node is built."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            mark = f"*{event.anchor}" if isinstance(event, yaml.AliasEvent) else f"&{getattr(event, 'anchor', '')}"
            raise BadInput(
                f"{name}:{line}: a YAML anchor or alias ({mark}) is not accepted in labctl files: "
                "write each value out in full."
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise BadInput(
                    f"{name}:{line}: lists and mappings nested more than {MAX_DEPTH} deep; "
                    "no labctl file needs that: flatten it."
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _check_tag(node: yaml.Node, name: str, prefix: KeyPath) -> None:
    allowed = _SCALAR_TAGS if isinstance(node, yaml.ScalarNode) else _COLLECTION_TAGS
    if node.tag not in allowed:
        short = node.tag.removeprefix(_PLAIN)
        what = _TAG_WORDS.get(short, f"a value tagged {short}")
        where = f": {dotted(prefix)}" if prefix else ""
        raise BadInput(
            f"{name}:{node.start_mark.line + 1}{where}: found {what}; labctl files hold only text, "
            "numbers, true/false, null, lists and mappings: quote the value to keep it as text."
        )


def _collect_lines(node: yaml.Node, prefix: KeyPath, lines: dict[KeyPath, int], name: str) -> None:
    _check_tag(node, name, prefix)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _PLAIN + "str":
                shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else "a list or mapping"
                raise BadInput(
                    f"{name}:{line}{': ' + dotted(prefix) if prefix else ''}: the key {str(shown)[:40]!r} is not "
                    "text; every key in a labctl file is text: quote it (or remove it)."
                )
            key = str(key_node.value)
            if key in seen:
                raise BadInput(f"{name}:{line}: {dotted((*prefix, key))}: duplicate key; keep one.")
            seen.add(key)
            lines[(*prefix, key)] = line
            _collect_lines(value_node, (*prefix, key), lines, name)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*prefix, index)] = item.start_mark.line + 1
            _collect_lines(item, (*prefix, index), lines, name)
