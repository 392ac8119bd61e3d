"""Exports: one self-contained file that rebuilds a run (record, resolved profile, compose file),
hashed over its content: built from a record, written, and read back with every field checked."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from labctl.catalog.engines import load_engine
from labctl.catalog.image import DIGEST
from labctl.catalog.lab import Lab, check_name
from labctl.catalog.profiles import Profile, check_profile_spec, printable
from labctl.catalog.sourcefile import KeyPath, SourceFile, load_yaml_mapping
from labctl.compose.canonical import canonical_compose, sha256_text
from labctl.compose.labels import RunLabels
from labctl.compose.render import SECRETS_TARGET, RenderOptions, render_compose
from labctl.errors import BadInput
from labctl.host.remote.key_volume import volume_name as key_volume_name
from labctl.run.records.record import SCHEMA_VERSION, Record
from labctl.run.records.store import MAX_RECORD_BYTES, Runs, is_run_id, parse_record, read_text_file

EXPORT_SCHEMA = 1
# An export embeds a whole run record and the compose file beside the setup: ~10 KiB today, and it
# grows with the host (GPU devices, run labels, timings). 4 MiB leaves room for any real run while
# an export still parses in well under a second.
EXPORT_MAX_BYTES = 4 * 1024 * 1024
HOST_KEYS = ("port", "host")  # resolved-profile values that belong to the host, not the setup


@dataclass
class Export:
    """A run as a colleague receives it: what defines the setup, where it ran, the compose file used."""

    doc: dict[str, Any]
    source: str
    lines: dict[KeyPath, int] = field(default_factory=dict)  # where each key stands in the export file

    @property
    def setup(self) -> dict[str, Any]:
        return dict(self.doc["setup"])

    @property
    def host(self) -> dict[str, Any]:
        return dict(self.doc["host"])

    @property
    def compose(self) -> str:
        return str(self.doc["compose"])

    @property
    def record(self) -> dict[str, Any]:
        return dict(self.doc["record"])

    @property
    def run_id(self) -> str:
        return str(self.host["run_id"])

    def typed_record(self) -> Record:
        try:
            return Record.from_json(self.record)
        except (ValueError, TypeError) as exc:
            raise BadInput(f"{self.source}: its record section is not a labctl run record ({exc}).") from None

    def resolved_profile(self) -> dict[str, Any]:
        spec: dict[str, Any] = copy.deepcopy(self.setup["resolved_profile"])
        spec["port"] = self.host["port"]
        spec["host"] = self.host["bind"]
        if self.host.get("gpu_ids"):
            spec["gpus"] = {"device_ids": list(self.host["gpu_ids"])}
        return spec


def content_hash(doc: dict[str, Any]) -> str:
    body = {k: v for k, v in doc.items() if k != "content_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def content_problem(export: Export) -> str | None:
    """A file whose content does not hash to the hash it states is broken (cut short) or edited: nothing
    it says is believed, whatever flag is given."""
    recorded, actual = export.doc.get("content_sha256"), content_hash(export.doc)
    if recorded == actual:
        return None
    return (
        f"content hash mismatch: the file says {str(recorded)[:80]}, its content hashes to {actual} "
        "(truncated, or edited by hand)"
    )


def recorded_run_labels(raw: Any) -> dict[str, str]:
    """Only the run labels labctl itself writes (run id, owner, port, …), parsed as labels: an export cannot
    smuggle other labels, keys or values into the re-rendered file."""
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        return {}
    return RunLabels.from_labels(raw).run_labels()


def render_recorded(lab: Lab, export: Export, profile: Profile) -> str:
    """The export's setup rendered here with its recorded host values: what its compose text should be."""
    host = export.host
    options = RenderOptions(
        cache_dir=host["cache_dir"],
        engine_store=host.get("engine_store"),
        allow_unsupported=bool(export.setup.get("allow_unsupported")),
        labels=recorded_run_labels(host.get("run_labels")),
        # A run on a simulated GPU host was labelled harness-check; an export may only ever lower the label.
        environment_label="harness-check" if export.setup.get("environment_label") == "harness-check" else None,
        **_resident_options(export),
    )
    return render_compose(lab, profile, options)


def _resident_options(export: Export) -> dict[str, Any]:
    """A resident run's host values (restart policy, this run's key folder or volume, the key's group), taken
    from the carried text only in the shapes labctl itself renders them: anything else stays a difference."""
    record = export.doc.get("record")
    if not isinstance(record, dict) or not isinstance(record.get("resident"), dict):
        return {}
    options: dict[str, Any] = {"restart": "unless-stopped"}
    try:
        serve = yaml.safe_load(export.compose)["services"]["serve"]
        volumes = [v for v in serve.get("volumes") or [] if _key_mount(v, export.run_id)]
        group = serve.get("group_add")
    except (yaml.YAMLError, TypeError, KeyError, AttributeError):
        return options
    if len(volumes) == 1 and volumes[0]["type"] == "bind":
        options["secrets_dir"] = volumes[0]["source"]
        if isinstance(group, list) and len(group) == 1 and str(group[0]).isdigit():
            options["key_group"] = int(group[0])
    elif len(volumes) == 1:
        options["secrets_volume"] = volumes[0]["source"]
    return options


def same_compose(carried: str, rendered: str) -> bool:
    """Whether a carried compose text says to Docker what the setup renders, comments aside (such as the
    labctl version line), and an image named by its id (a copied image has no repository digest there).
    Anything added or changed (`privileged: true`, a mount of `/`, another command) makes it another setup."""
    try:
        mine, theirs = yaml.safe_load(carried), yaml.safe_load(rendered)
    except yaml.YAMLError:
        return False
    if not isinstance(mine, dict) or not isinstance(theirs, dict):
        return False
    return bool(_with_image_ids(mine, theirs) == theirs)


_IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")


def _with_image_ids(doc: dict[str, Any], rendered: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    services, theirs = doc.get("services"), rendered.get("services")
    if isinstance(services, dict) and isinstance(theirs, dict):
        for name, service in services.items():
            mine = theirs.get(name)
            if isinstance(service, dict) and isinstance(mine, dict) and _IMAGE_ID.fullmatch(str(service.get("image"))):
                service["image"] = mine.get("image")
    return doc


def _key_mount(volume: Any, run_id: str) -> bool:
    """This run's own key folder (or volume), read-only at the key's place, as labctl renders it."""
    if not isinstance(volume, dict) or volume.get("target") != SECRETS_TARGET or volume.get("read_only") is not True:
        return False
    source = str(volume.get("source") or "")
    if volume.get("type") == "bind":
        return source.startswith("/") and Path(source).name == run_id and ".." not in Path(source).parts
    return volume.get("type") == "volume" and source == key_volume_name(run_id)


def recomputed_compose_hash(lab: Lab, export: Export, profile: Profile) -> str:
    """The compose hash recomputed from the setup the export carries (never the hash it states)."""
    digest = export.setup["image"].get("digest")
    allow = bool(export.setup.get("allow_unsupported"))
    return sha256_text(canonical_compose(lab, profile.engine, profile.name, profile.spec, digest, allow))


def compose_text_hash(lab: Lab, export: Export, profile: Profile) -> str:
    """The compose hash of the compose text the export carries: its setup's canonical hash when the text is
    what that setup renders (comments aside); otherwise the text is not that setup, and its own hash says so."""
    if same_compose(export.compose, render_recorded(lab, export, profile)):
        return recomputed_compose_hash(lab, export, profile)
    return f"not its setup's: compose text sha256 {sha256_text(export.compose)}"


def build_export(record: Record, compose_text: str) -> dict[str, Any]:
    spec = record.resolved_profile or {}
    data = record.to_json()
    setup = {
        "engine": record.engine,
        "profile": record.profile,
        "profile_sha256": record.profile_sha256,
        "resolved_profile": {k: v for k, v in spec.items() if k not in HOST_KEYS and k != "gpus"}
        | {"gpus": {"count": record.gpus.count} if record.gpus.count else None},
        "image": {
            "reference": record.image.reference,
            "digest": record.image.digest,
            "pinned": record.image.pinned,
            "image_id": record.image.image_id,  # what identifies a local image that no registry gave a digest
        },
        "allow_unsupported": record.allow_unsupported,
        "served_model_name": record.served_model_name,
        "environment_label": record.environment_label,
        "labctl_version": record.labctl_version,
        "engine_version": record.engine_version,
        "env_names": list(record.env_names),
        "compose_sha256": record.setup.get("compose_sha256"),
    }
    options = record.compose.render_options if record.compose else {}
    host = {
        "run_id": record.run_id,
        "user": record.user,
        "owner": record.owner,
        "host": record.host,
        "created_at": record.created_at,
        "port": spec["port"],
        "bind": spec["host"],
        "gpu_ids": list(record.gpus.ids),
        "gpu_devices": data["gpus"]["devices"],
        "host_entry": record.host_entry,
        "docker_endpoint": record.docker_endpoint,
        "docker_host_id": record.docker_host_id,
        "docker_host_name": record.docker_host_name,
        "cache_dir": options.get("cache_dir"),
        "engine_store": options.get("engine_store"),
        "run_labels": data["run_labels"] or {},
        "timings": data["timings"],
    }
    doc: dict[str, Any] = {
        "labctl_export": EXPORT_SCHEMA,
        "setup": setup,
        "host": host,
        "compose": compose_text,
        "record": data,
    }
    doc["content_sha256"] = content_hash(doc)
    return doc


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # a person reads this file: no &id001 anchors


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_export(doc: dict[str, Any]) -> str:
    header = (
        f"{EXPORT_HEADER}{doc['host']['run_id']} ({doc['setup']['engine']}/{doc['setup']['profile']}).\n"
        "# Rebuild it: labctl reproduce THIS_FILE [--gpus ...] [--port ...]. Without labctl: the `compose` key is\n"
        "# the compose file used (docker compose -f FILE up -d). `setup` defines it; `host` says where it ran.\n"
    )
    ordered = {k: doc[k] for k in ("labctl_export", "content_sha256", "setup", "host", "compose", "record")}
    return header + yaml.dump(ordered, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


EXPORT_HEADER = "# labctl export of run "


def is_labctl_export(path: Path) -> bool:
    """Whether a file is one labctl wrote as an export (its header and schema key): replaced without --overwrite."""
    try:
        with path.open("rb") as handle:
            head = handle.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return False
    return head.startswith(EXPORT_HEADER) and "\nlabctl_export: " in head


def export_from_run(runs: Runs, run_id: str) -> Export:
    record = runs.load(run_id)
    compose_file = runs.dir(run_id) / "compose.yaml"
    if not compose_file.is_file():
        raise BadInput(f"run {run_id} has no compose.yaml beside its record: it cannot be exported.")
    compose_text = read_text_file(compose_file, "compose file", MAX_RECORD_BYTES)
    return Export(build_export(record, compose_text), source=f"run {run_id}")


_REQUIRED = {
    "setup": ("engine", "profile", "resolved_profile", "image", "compose_sha256", "environment_label"),
    "host": ("run_id", "port", "bind", "gpu_ids", "cache_dir", "run_labels"),
}


def load_export(path: Path) -> Export:
    src = load_yaml_mapping(path, max_bytes=EXPORT_MAX_BYTES)
    doc = src.data
    version = doc.get("labctl_export")
    if not isinstance(version, int):
        raise BadInput(f"{path}: not a labctl export (no 'labctl_export: <schema version>' at the top).")
    if version > EXPORT_SCHEMA:
        raise BadInput(
            f"{path}: export schema version {version} is newer than this labctl reads ({EXPORT_SCHEMA}). "
            "Upgrade labctl."
        )
    if version < 1:
        raise BadInput(f"{path}: unknown export schema version {version}.")
    for section, keys in _REQUIRED.items():
        if not isinstance(doc.get(section), dict):
            raise BadInput(f"{src.where((section,))}: missing or not a mapping: the export is truncated or invalid.")
        for key in keys:
            if key not in doc[section]:
                raise BadInput(f"{src.where((section,))}: missing {section}.{key}: the export is truncated or invalid.")
    for key in ("compose", "record", "content_sha256"):
        if key not in doc:
            raise BadInput(f"{path}: missing '{key}': the export is truncated or invalid.")
    check_record_schema(doc["record"], str(path))
    image = doc["setup"]["image"]
    digest = image.get("digest") if isinstance(image, dict) else None
    if not isinstance(image, dict) or not (digest is None or (isinstance(digest, str) and DIGEST.match(digest))):
        raise BadInput(
            f"{src.where(('setup', 'image', 'digest'))}: not a sha256 digest (sha256: and 64 lower-case hex "
            "digits): the export is invalid or was edited by hand."
        )
    for key in ("environment_label", "served_model_name"):
        value = doc["setup"].get(key)
        if value is not None and (not isinstance(value, str) or not printable(value)):
            raise BadInput(
                f"{src.where(('setup', key))}: {str(value)[:60]!r} is not a plain name (control characters such as "
                "ESC or a newline are refused): the export is invalid or was edited by hand."
            )
    run_id = doc["host"]["run_id"]
    if not isinstance(run_id, str) or not is_run_id(run_id):
        raise BadInput(
            f"{src.where(('host', 'run_id'))}: {str(run_id)[:40]!r} is not a run id (like 20261203-015815-a1b2c3): "
            "the export is invalid or was edited by hand."
        )
    parse_record(doc["record"], path, "The export is truncated or was edited by hand: export the run again.")
    return Export(doc, source=str(path), lines=src.lines)


def check_record_schema(record: Any, where: str) -> None:
    version = record.get("schema_version") if isinstance(record, dict) else None
    if not isinstance(version, int):
        raise BadInput(f"{where}: the record has no schema_version: not a labctl run record.")
    if version > SCHEMA_VERSION:
        raise BadInput(
            f"{where}: record schema version {version} is newer than this labctl reads ({SCHEMA_VERSION}). "
            "Upgrade labctl."
        )


def load_source(runs: Runs, source: str) -> Export:
    if is_run_id(source) and not Path(source).exists():
        return export_from_run(runs, source)
    return load_export(Path(source))


def recorded_profile(lab: Lab, export: Export) -> Profile:
    setup = export.setup
    engine = load_engine(lab, str(setup["engine"]))
    check_name(str(setup["profile"]), "profile")  # it reaches the compose file and paths: a name, nothing else
    data = export.resolved_profile()
    if data.get("gpus") is None:
        data.pop("gpus", None)
    prefix = ("setup", "resolved_profile")
    lines = {key[2:]: line for key, line in export.lines.items() if key[:2] == prefix}
    lines[()] = export.lines.get(prefix, 0)
    src = SourceFile(path=Path(export.source), data=data, lines=lines, display=export.source, prefix=prefix)
    spec = check_profile_spec(engine, src, data)
    return Profile(engine=engine, name=str(setup["profile"]), spec=spec, source=None)
