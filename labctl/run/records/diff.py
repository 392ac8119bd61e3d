"""Two setups side by side (labctl diff): which rows define a setup, which only say where it ran."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labctl.catalog.engines import list_engine_names
from labctl.catalog.lab import Lab
from labctl.catalog.sourcefile import parse_yaml
from labctl.compose.canonical import canonical_compose
from labctl.errors import BadInput
from labctl.run.records.export import Export, compose_text_hash, content_problem, load_source, recorded_profile
from labctl.run.records.record import Record
from labctl.run.records.store import Runs


@dataclass(frozen=True)
class SetupView:
    """The rows `labctl diff` compares, from a record (or the record inside an export)."""

    source: str
    rows: dict[str, str]
    host_rows: dict[str, str]
    info_rows: dict[str, str]


def setup_view(source: str, record: Record, canonical: str | None, compose_hash: str | None = None) -> SetupView:
    spec = record.resolved_profile or {}
    compose: dict[str, Any] = {}
    serve: dict[str, Any] = {}
    if canonical:
        compose = parse_yaml(canonical, "canonical compose", {})
        serve = compose["services"]["serve"]
    argv = [*(serve.get("entrypoint") or []), *(serve.get("command") or [])]
    resident = record.resident
    setup = record.engine_setup
    rows = {
        "engine": record.engine,
        "image digest": str(record.image.digest),
        "engine version": _flat(record.engine_version),
        "engine args": " ".join(w.replace("$$", "$") for w in argv) if argv else "?",
        "engine options file": options_files(compose) if canonical else "?",
        "environment variable names": ", ".join(record.env_names) or "-",
        "model": str((spec.get("model") or {}).get("id", "?")),
        "model revision": str((spec.get("model") or {}).get("revision", "?")),
        "thinking mode": setup.thinking if setup else "?",
        "served model name": record.served_model_name,
        "GPU count": str(record.gpus.count),
        # A deployment kept up for days with keys is another setup than a one-off run of the same engine.
        "resident": f"{resident.restart_policy}, auth {resident.auth}" if resident else "no",
        "labctl version": record.labctl_version or "?",
        "environment label": record.environment_label or "?",
        # recomputed from what the file carries: the hash it states is a claim, not a fact
        "compose hash": compose_hash or f"{record.setup.get('compose_sha256', '?')} (as recorded: engine unknown here)",
    }
    # Pinning a profile changes its hash but not what runs (the digest and compose hash say that).
    info_rows = {"profile hash": record.profile_sha256 or "?", "profile": record.profile}
    host_rows = {
        "GPU ids": ",".join(record.gpus.ids) or "-",
        "port": str(record.endpoint.port),
        "host": record.host or "?",
        "Docker host": f"{record.host_entry} ({record.docker_host_name or record.docker_endpoint})",
        "run id": record.run_id,
    }
    return SetupView(source=source, rows=rows, host_rows=host_rows, info_rows=info_rows)


def options_files(compose: dict[str, Any]) -> str:
    """The files the engine reads its further options from (Compose configs of the serve service), one line."""
    configs = compose.get("configs") or {}
    shown = []
    for config in compose["services"]["serve"].get("configs") or []:
        content = str((configs.get(config["source"]) or {}).get("content", "")).replace("$$", "$")
        shown.append(f"{config['target']}: {' | '.join(line for line in content.splitlines() if line)}")
    return "; ".join(shown) or "-"


def _flat(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items()) if not isinstance(v, (dict, list)))[:200]
    return str(value)[:200]


def compare(a: SetupView, b: SetupView) -> list[tuple[str, str, str, bool, str]]:
    """(field, value A, value B, same, kind) rows; kind 'setup' rows decide identity, 'info' and 'host'
    rows are shown only."""
    out = [(k, a.rows[k], b.rows[k], a.rows[k] == b.rows[k], "setup") for k in a.rows]
    out += [(k, a.info_rows[k], b.info_rows[k], a.info_rows[k] == b.info_rows[k], "info") for k in a.info_rows]
    out += [(k, a.host_rows[k], b.host_rows[k], a.host_rows[k] == b.host_rows[k], "host") for k in a.host_rows]
    return out


@dataclass(frozen=True)
class SetupDiff:
    rows: list[tuple[str, str, str, bool, str]]

    @property
    def differing(self) -> list[str]:
        return [field for field, _, _, same, kind in self.rows if not same and kind == "setup"]

    def to_json(self) -> dict[str, Any]:
        rows = [{"field": f, "a": va, "b": vb, "same": same, "kind": kind} for f, va, vb, same, kind in self.rows]
        return {"identical": not self.differing, "differing": self.differing, "rows": rows}


def diff_setups(lab: Lab, runs: Runs, a: str, b: str) -> SetupDiff:
    """Each side is a run id in this home or an export file."""
    views = []
    for source in (a, b):
        exported = load_source(runs, source)
        damaged = content_problem(exported)
        if damaged:
            raise BadInput(f"{exported.source}: {damaged}. Nothing in it is believed; ask for a fresh `labctl export`.")
        views.append(setup_view(source, exported.typed_record(), *_canonical(lab, exported)))
    return SetupDiff(compare(views[0], views[1]))


def _canonical(lab: Lab, exported: Export) -> tuple[str | None, str | None]:
    """The canonical compose text of the setup and the compose hash of the text the export carries."""
    if str(exported.setup.get("engine")) not in list_engine_names(lab):
        return None, None  # an engine this lab does not define: compare what the record says
    profile = recorded_profile(lab, exported)  # a setup this lab refuses (extra_args re-setting a flag) is refused
    canonical = canonical_compose(
        lab,
        profile.engine,
        profile.name,
        profile.spec,
        exported.setup["image"].get("digest"),
        bool(exported.setup.get("allow_unsupported")),
    )
    return canonical, compose_text_hash(lab, exported, profile)
