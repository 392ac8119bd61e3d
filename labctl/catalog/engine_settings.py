"""Effective settings: what an engine computes with (KV-cache dtype, prefix caching, chunked prefill,
speculative decoding, its batch cap, sampling defaults), resolved from what the engine reports about itself,
else from the rendered command, else from the defaults its folder states with where each was read
(engines/NAME/engine.yaml `settings`). Pure: the caller fetches what the engine reports."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from labctl.catalog.engine_metrics import PROMETHEUS_NAME
from labctl.catalog.fields import Field

# Each setting the `settings` block reads and the kind of value it holds: on/off, a word, or a whole number.
# Generic names, whatever the engine calls its option.
SETTINGS = {
    "kv_cache_dtype": "word",
    "prefix_caching": "switch",
    "chunked_prefill": "switch",
    "speculative_decoding": "word",
    "sampling_defaults": "word",
}
# The batch cap is a setting too, but its home is the folder's `batch_cap` block (labctl.catalog.batch_cap):
# the effective settings carry it as `max_batch`, read by that block's rule, never stated twice.
BATCH_CAP = "max_batch"
SHOWN = ("kv_cache_dtype", "prefix_caching", "chunked_prefill", "speculative_decoding", BATCH_CAP, "sampling_defaults")
# Settings two results must share to compare under the same rules: they change what a level computes.
SAME_RULES = ("prefix_caching", "kv_cache_dtype")
TITLES = {
    "kv_cache_dtype": "KV-cache dtype",
    "prefix_caching": "prefix caching",
    "chunked_prefill": "chunked prefill",
    "speculative_decoding": "speculative decoding",
    "max_batch": "batch cap",
    "sampling_defaults": "sampling defaults",
}
REPORT_FORMATS = ("prometheus", "json")  # labels of an info gauge (vLLM, TensorRT-LLM), keys of a JSON object (SGLang)
# How an engine's own value reads as the setting: negate (a `disable_…` switch), positive (a chunk size: > 0 is on),
# present (a method name, or null / None for off).
MEANINGS = ("negate", "positive", "present")
SOURCES = ("engine", "command", "default", "unknown")
MAX_VALUE = 120
_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]{0,63}")  # fullmatch
_OPTION_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,3}")  # fullmatch
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # fullmatch


def _scalar(value: Any) -> bool:
    if isinstance(value, str):
        return 0 < len(value) <= MAX_VALUE and value.isprintable()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return math.isfinite(value)
    return isinstance(value, bool)


def _text(allowed: str, required: bool = False) -> Field:
    return Field("str", allowed, required=required, check=lambda v: 0 < len(v) <= 300 and "\n" not in v)


SETTING = Field(
    "map",
    "how one setting is read: reported, command, default, default_from, aliases",
    fields={
        "reported": Field(
            "map",
            "where the engine states it: {metric: NAME, label: LABEL} (prometheus) or {key: NAME} (json)",
            fields={
                "metric": Field(
                    "str", "a Prometheus metric name", check=lambda v: PROMETHEUS_NAME.fullmatch(v) is not None
                ),
                "label": Field("str", "a label name", check=lambda v: _KEY.fullmatch(v) is not None),
                "key": Field("str", "a key of the JSON object", check=lambda v: _KEY.fullmatch(v) is not None),
                "means": Field("str", "one of " + ", ".join(MEANINGS), check=lambda v: v in MEANINGS),
            },
        ),
        "command": Field(
            "list",
            "command-line forms, the last one on the command line wins: {flag: --x} (its value), {flag: --x, "
            "value: V} (V when present), {option: a.b} (a key of the engine's options file, which wins)",
            default=list,
            check=lambda v: len(v) <= 8,
            item=Field(
                "map",
                "{flag: --x} or {flag: --x, value: V} or {option: a.b}, with means: " + "|".join(MEANINGS),
                fields={
                    "flag": Field(
                        "str", "an option such as --kv-cache-dtype", check=lambda v: _FLAG.fullmatch(v) is not None
                    ),
                    "option": Field(
                        "str",
                        "a dotted key of the options file, e.g. kv_cache_config.dtype",
                        check=lambda v: _OPTION_PATH.fullmatch(v) is not None,
                    ),
                    "value": Field("any", "a string, number or true/false", check=_scalar),
                    "means": Field("str", "one of " + ", ".join(MEANINGS), check=lambda v: v in MEANINGS),
                },
            ),
        ),
        "default": Field(
            "any", "the engine's own value when nothing sets it (a string, number or true/false)", check=_scalar
        ),
        "default_from": _text(
            "where the default was read (repository@commit path, or the wheel), or why it is unknown", required=True
        ),
        "aliases": Field(
            "map",
            "the engine's word -> the common one, e.g. {fp8_e4m3: fp8}",
            item=Field("str", "a word", check=lambda v: 0 < len(v) <= MAX_VALUE),
        ),
    },
)
SETTINGS_FIELD = Field(
    "map",
    "what the engine computes with, and where each setting is read",
    fields={
        "read_from": _text("where these facts were read (repository@commit or wheel, paths)", required=True),
        "report": Field(
            "map",
            "the route where the engine states its settings itself",
            fields={
                "route": Field(
                    "str", "an HTTP path such as /metrics", required=True, check=lambda v: v.startswith("/")
                ),
                "format": Field(
                    "str", "one of " + ", ".join(REPORT_FORMATS), required=True, check=lambda v: v in REPORT_FORMATS
                ),
            },
        ),
        **{name: SETTING for name in SETTINGS},
    },
)


@dataclass(frozen=True)
class Reported:
    metric: str | None
    label: str | None
    key: str | None
    means: str | None


@dataclass(frozen=True)
class CommandForm:
    flag: str | None
    option: str | None
    value: Any
    means: str | None


@dataclass(frozen=True)
class Rule:
    name: str
    reported: Reported | None
    command: tuple[CommandForm, ...]
    default: Any
    default_from: str
    aliases: Mapping[str, str]


@dataclass(frozen=True)
class SettingRules:
    """One engine's `settings` block, typed."""

    read_from: str
    route: str | None
    format: str | None
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class Effective:
    """One setting as the engine ran it: the value (the common word), whence (engine, command, default or
    unknown), where exactly, and the engine's own word when the common one differs."""

    value: str
    source: str
    where: str = ""
    raw: str | None = None

    def describe(self) -> str:
        own = f" ({self.raw})" if self.raw and self.raw != self.value else ""
        return (
            f"{self.value}{own} [{self.source}: {self.where}]" if self.where else f"{self.value}{own} [{self.source}]"
        )


UNKNOWN = "unknown"


def settings_problem(spec: dict[str, Any], has_options_file: bool) -> tuple[tuple[str | int, ...], str] | None:
    """What the field checker cannot say (the key under `settings` and the problem): each form names a flag or an
    option, the reported part fits the report's format."""
    fmt = (spec["report"] or {}).get("format")
    for name in SETTINGS:
        rule = spec[name]
        if rule is None:
            continue
        reported = rule["reported"]
        if reported is not None:
            if fmt is None:
                return (name, "reported"), "a reported value needs settings.report (route and format)."
            wants = ("metric", "label") if fmt == "prometheus" else ("key",)
            if any(reported[k] is None for k in wants) or any(
                reported[k] is not None for k in ("metric", "label", "key") if k not in wants
            ):
                return (name, "reported"), f"with format {fmt}, give {' and '.join(wants)} only."
        for i, form in enumerate(rule["command"]):
            if (form["flag"] is None) == (form["option"] is None):
                return (name, "command", i), "give flag or option, one of them."
            if form["option"] is not None and not has_options_file:
                return (name, "command", i), "an option form needs the engine's options_file."
    return None


def setting_rules(spec: dict[str, Any]) -> SettingRules:
    rules = []
    for name in SETTINGS:
        rule = spec[name]
        if rule is None:
            continue
        reported = rule["reported"]
        rules.append(
            Rule(
                name=name,
                reported=None
                if reported is None
                else Reported(reported["metric"], reported["label"], reported["key"], reported["means"]),
                command=tuple(CommandForm(f["flag"], f["option"], f["value"], f["means"]) for f in rule["command"]),
                default=rule["default"],
                default_from=str(rule["default_from"]),
                aliases=dict(rule["aliases"] or {}),
            )
        )
    report = spec["report"] or {}
    return SettingRules(str(spec["read_from"]), report.get("route"), report.get("format"), tuple(rules))


def _word(value: Any) -> str:
    return str(value)[:MAX_VALUE] if not isinstance(value, float) or not value.is_integer() else str(int(value))


def _switch(value: Any) -> str | None:
    if isinstance(value, bool):
        return "on" if value else "off"
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return "on"
    if text in ("false", "0", "no", "off"):
        return "off"
    return None


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def as_setting(name: str, value: Any, means: str | None, aliases: Mapping[str, str]) -> tuple[str, str] | None:
    """(the common word, the engine's own word) for a value as the engine or its command gives it; None when it
    does not read as this setting (an unknown word for a switch)."""
    own = _word(value)
    if means == "present":
        off = value is None or value is False or str(value).strip().lower() in ("", "none", "null", "false", "off")
        value = "off" if off else value
    elif means == "positive":
        number = _number(value)
        if number is None:
            return None
        value = number > 0
    elif means == "negate":
        flipped = _switch(value)
        if flipped is None:
            return None
        value = flipped == "off"
    if value is None:
        return None
    kind = SETTINGS[name]
    if kind == "switch":
        word = _switch(value)
    elif kind == "count":
        number = _number(value)
        word = None if number is None or not number.is_integer() or number < 0 else str(int(number))
    else:
        word = _word(value).strip() or None
    if word is None:
        return None
    return aliases.get(word, word), own


def from_command(rules: SettingRules, words: Sequence[str], options: Mapping[str, Any] | None) -> dict[str, Effective]:
    """The settings the command line (and the options file labctl writes) set; argparse's rule: the last wins."""
    found: dict[str, Effective] = {}
    for rule in rules.rules:
        best: tuple[int, Effective] | None = None
        for form in rule.command:
            if form.flag is None:
                continue
            for index, word in enumerate(words):
                name, eq, inline = word.partition("=")
                if name != form.flag:
                    continue
                if form.value is not None:
                    raw: Any = form.value
                elif eq:
                    raw = inline
                elif index + 1 < len(words):
                    raw = words[index + 1]
                else:
                    continue
                read = as_setting(rule.name, raw, form.means, rule.aliases)
                if read is not None and (best is None or index >= best[0]):
                    best = (index, Effective(read[0], "command", form.flag, read[1]))
        for form in rule.command:
            if form.option is None or options is None:
                continue
            value: Any = options
            for part in form.option.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
            read = None if value is None else as_setting(rule.name, value, form.means, rule.aliases)
            if read is not None:  # the options file's keys override the command line's
                best = (len(words), Effective(read[0], "command", f"options file {form.option}", read[1]))
        if best is not None:
            found[rule.name] = best[1]
    return found


_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def info_labels(text: str, metric: str) -> dict[str, str] | None:
    """The labels of the first series of an info gauge (`NAME{a="x",…} 1`) in Prometheus text; None when absent."""
    for line in text.splitlines():
        if not line.startswith(metric + "{"):
            continue
        body = line[len(metric) + 1 : line.rfind("}")]
        return {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(body)}
    return None


def from_report(rules: SettingRules, body: str) -> dict[str, Effective]:
    """The settings the engine states in the answer of its report route (Prometheus text or a JSON object)."""
    found: dict[str, Effective] = {}
    data: Any = None
    if rules.format == "json":
        try:
            data = json.loads(body)
        except ValueError:
            return found
        if not isinstance(data, dict):
            return found
    series: dict[str, dict[str, str] | None] = {}
    for rule in rules.rules:
        reported = rule.reported
        if reported is None:
            continue
        if reported.key is not None:
            if reported.key not in data:
                continue
            raw, where = data[reported.key], f"GET {rules.route} {reported.key}"
        else:
            assert reported.metric is not None and reported.label is not None
            if reported.metric not in series:
                series[reported.metric] = info_labels(body, reported.metric)
            labels = series[reported.metric]
            if labels is None or reported.label not in labels:
                continue
            raw, where = labels[reported.label], f"GET {rules.route} {reported.metric}{{{reported.label}}}"
        read = as_setting(rule.name, raw, reported.means, rule.aliases)
        if read is not None:
            found[rule.name] = Effective(read[0], "engine", where, read[1])
    return found


def resolve(
    rules: SettingRules, command: Mapping[str, Effective], reported: Mapping[str, Effective] | None
) -> dict[str, Effective]:
    """Each setting: what the engine reported, else what the command set, else the folder's default, else unknown."""
    out: dict[str, Effective] = {}
    for rule in rules.rules:
        if reported and rule.name in reported:
            out[rule.name] = reported[rule.name]
        elif rule.name in command:
            out[rule.name] = command[rule.name]
        elif rule.default is not None and (read := as_setting(rule.name, rule.default, None, rule.aliases)):
            out[rule.name] = Effective(read[0], "default", rule.default_from, read[1])
        else:
            out[rule.name] = Effective(UNKNOWN, "unknown", rule.default_from)
    return out


def differing(settings: Mapping[str, Mapping[str, Effective] | None]) -> dict[str, dict[str, Effective | None]]:
    """Setting -> who ran it with what, for the settings whose values differ between the given (named) setups."""
    out: dict[str, dict[str, Effective | None]] = {}
    for name in SHOWN:
        values = {who: (found or {}).get(name) for who, found in settings.items()}
        if len({v.value if v else UNKNOWN for v in values.values()}) > 1:
            out[name] = values
    return out
