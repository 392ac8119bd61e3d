"""JSON Schemas of the files people write (profiles, workloads, studies, suites, the hosts file), generated
from the field tables their loaders check with, for editors. `make reference` writes them into labctl/schemas/
(shipped in the wheel) and a test fails when a committed schema and its table differ; `labctl schema KIND`
prints one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

SHIPPED = Path(__file__).resolve().parent.parent / "schemas"


@dataclass(frozen=True)
class Kind:
    name: str
    files: str  # where such files live, for the editor mapping
    description: str


KINDS = (
    Kind("profile", "engines/*/profiles/*.yaml", "A labctl launch profile: one engine, one model, pinned."),
    Kind("workload", "workloads/*.yaml", "A labctl workload: the dataset, the levels and the requests of a bench."),
    Kind("study", "studies/*.yaml", "A labctl study: profiles x overrides x hosts, measured unattended."),
    Kind("suite", "suites/*/suite.yaml", "A labctl quality suite: versioned cases with their checks."),
    Kind("hosts", "hosts.yaml", "A labctl hosts file: the Docker hosts and Slurm clusters a lab drives."),
)


def schema_of(kind: str) -> dict[str, Any]:
    from labctl.catalog.json_schema import EACH, json_schema

    (chosen,) = [k for k in KINDS if k.name == kind]
    title = f"labctl {kind}"
    if kind == "profile":
        from labctl.catalog.profiles import PROFILE_FIELDS

        return json_schema(title, chosen.description, PROFILE_FIELDS, {})
    if kind == "workload":
        from labctl.bench.workloads import WORKLOAD_FIELDS

        return json_schema(title, chosen.description, WORKLOAD_FIELDS, {})
    if kind == "study":
        from labctl.study.spec import FIELDS

        return json_schema(title, chosen.description, FIELDS, {})
    if kind == "suite":
        from labctl.quality.suites import CASE_FIELDS, SUITE_FIELDS

        return json_schema(title, chosen.description, SUITE_FIELDS, {("cases", EACH): CASE_FIELDS})
    from labctl.catalog.clusters_file import CLUSTER_FIELDS, NODE_FIELDS
    from labctl.catalog.hosts_file import FILE_FIELDS, HOST_FIELDS

    entries = {
        ("hosts", EACH): HOST_FIELDS,
        ("clusters", EACH): CLUSTER_FIELDS,
        ("clusters", EACH, "nodes", EACH): NODE_FIELDS,
    }
    return json_schema(title, chosen.description, FILE_FIELDS, entries)


def schema_text(kind: str) -> str:
    return json.dumps(schema_of(kind), indent=2, ensure_ascii=False) + "\n"


def write_schemas(folder: Path = SHIPPED) -> list[str]:
    """Write every schema; returns the names of those that changed."""
    folder.mkdir(parents=True, exist_ok=True)
    changed = []
    for kind in KINDS:
        path = folder / f"{kind.name}.schema.json"
        text = schema_text(kind.name)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(path.name)
    return changed


def register(app: typer.Typer) -> None:
    app.command("schema")(schema)


def _complete_kind(incomplete: str) -> list[str]:
    return [k.name for k in KINDS if k.name.startswith(incomplete)]


def schema(
    kind: Annotated[
        str | None,
        typer.Argument(
            autocompletion=_complete_kind, help="profile, workload, study, suite or hosts (default: list them)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Without KIND: print a JSON list.")] = False,
) -> None:
    """Print the JSON Schema of a lab file kind, for editors; without KIND, list the kinds and their shipped files.

    The schemas come from the same field tables `labctl validate` checks with; rules written as code (a pinned
    digest, a Hub name's pattern) are in each field's description, and `validate` remains the judge.

    Example: labctl schema profile
    """
    from labctl.cli.context import listing
    from labctl.errors import BadInput

    if kind is None:
        rows = [[k.name, k.files, str(SHIPPED / f"{k.name}.schema.json")] for k in KINDS]
        listing(rows, ["KIND", "FILES", "SCHEMA"], as_json)
        return
    if kind not in {k.name for k in KINDS}:
        raise BadInput(f"unknown schema kind {kind!r}: one of {', '.join(k.name for k in KINDS)}.")
    print(schema_text(kind), end="")
