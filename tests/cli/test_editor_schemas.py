"""The editors' JSON Schemas come from the loaders' field tables: every file the shipped lab holds is valid
against its schema, the loaders' common refusals (an unknown key, a wrong type, a missing field) are refusals of
the schema too, and the committed schemas are the generated ones."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from helpers.support import REPO
from typer.testing import CliRunner

from labctl.catalog.hosts_file import load_hosts
from labctl.cli import app
from labctl.cli.schemas import KINDS, SHIPPED, schema_of, schema_text

HOSTS = """\
default: gpu-a
hosts:
  gpu-a: {docker: ssh://lab@gpu-a.example:2222, nvidia_smi: [nvidia-smi], unified_memory_gib: 120}
  here: {docker: local, simulated: true}
clusters:
  lab-a:
    login: ssh://me@login.example
    partition: gpu
    time: 20
    nodes:
      n1: {docker: ssh://me@n1.example, socket: /var/run/docker.sock}
"""


def _files(kind: str) -> list[Path]:
    pattern = next(k.files for k in KINDS if k.name == kind)
    return sorted(REPO.glob(pattern))


def _validator(kind: str) -> jsonschema.protocols.Validator:
    schema = schema_of(kind)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("kind", [k.name for k in KINDS if k.name != "hosts"])
def test_every_shipped_file_is_valid_against_its_schema(kind: str) -> None:
    files = _files(kind)
    assert files, kind
    validator = _validator(kind)
    for path in files:
        errors = [
            f"{path}: {e.json_path}: {e.message}" for e in validator.iter_errors(yaml.safe_load(path.read_text()))
        ]
        assert errors == []


def test_a_hosts_file_the_loader_takes_is_valid_and_its_entries_are_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    monkeypatch.setenv("LABCTL_HOSTS", str(tmp_path / "hosts.yaml"))
    assert {"gpu-a", "here"} <= set(load_hosts(tmp_path).entries)
    validator = _validator("hosts")
    data = yaml.safe_load(HOSTS)
    assert list(validator.iter_errors(data)) == []
    data["hosts"]["gpu-a"]["dockr"] = "local"
    assert [list(e.absolute_path) for e in validator.iter_errors(data)] == [["hosts", "gpu-a"]]
    data = yaml.safe_load(HOSTS)
    data["clusters"]["lab-a"]["nodes"]["n1"]["docker"] = 5
    assert [list(e.absolute_path) for e in validator.iter_errors(data)] == [
        ["clusters", "lab-a", "nodes", "n1", "docker"]
    ]


@pytest.mark.parametrize(
    ("kind", "path", "change", "where"),
    [
        ("profile", "engines/harness/profiles/smoke.yaml", lambda d: d.update(imag="x"), "$"),
        ("profile", "engines/harness/profiles/smoke.yaml", lambda d: d.pop("served_model_name"), "$"),
        ("profile", "engines/harness/profiles/smoke.yaml", lambda d: d.update(max_num_seqs="8"), "$.max_num_seqs"),
        ("workload", "workloads/chat-sweep.yaml", lambda d: d["dataset"].update(input_len=[1]), "$.dataset.input_len"),
        ("workload", "workloads/chat-sweep.yaml", lambda d: d.update(requests=10**9), "$.requests"),
        ("study", "studies/harness-demo.yaml", lambda d: d.update(repeats=True), "$.repeats"),
    ],
)
def test_the_schema_refuses_what_the_loader_refuses(kind: str, path: str, change: object, where: str) -> None:
    data = yaml.safe_load((REPO / path).read_text())
    change(data)  # type: ignore[operator]
    assert where in {e.json_path for e in _validator(kind).iter_errors(data)}


def test_the_shipped_schemas_are_the_generated_ones_and_labctl_schema_prints_them() -> None:
    for kind in KINDS:
        shipped = SHIPPED / f"{kind.name}.schema.json"
        assert shipped.read_text(encoding="utf-8") == schema_text(kind.name), f"{shipped} is stale: make reference"
    printed = CliRunner().invoke(app, ["schema", "profile"], prog_name="labctl")
    assert printed.exit_code == 0 and json.loads(printed.output) == schema_of("profile")
    listed = CliRunner().invoke(app, ["schema", "--json"], prog_name="labctl")
    assert [row["kind"] for row in json.loads(listed.output)] == [k.name for k in KINDS]
