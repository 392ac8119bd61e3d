"""Text from files is inert on every output (issue 29, class 9): an ESC or a newline inside a value read
from a record, a profile, a result or an export is shown escaped on a terminal (labctl.cli.terminal, the one
place), escaped in report.md, kept as data in JSON, and refused at load where it is a name labctl owns
(a profile's served model name, an environment label, an export's setup)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.harness_proc import harness
from helpers.records import harness_run_record
from helpers.support import REPO, Result, run_labctl

from labctl.run.records.store import Runs

HOSTILE = "evil\x1b[2J\x1b[31m\nFAKE: all checks passed\r"
DIGEST = "sha256:" + "ef" * 32


def labctl(world: dict[str, Any], *args: str) -> Result:
    return run_labctl(*args, lab=world["lab"], env={"LABCTL_HOME": str(world["home"])})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two real results of the harness engine, then their files edited as a hostile colleague would."""
    root = tmp_path_factory.mktemp("inert")
    lab, home = root / "lab", root / "home"
    for folder in ("engines", "templates", "workloads", "suites"):
        shutil.copytree(REPO / folder, lab / folder)
    world: dict[str, Any] = {"lab": lab, "home": home}
    args = ("--workload", "latency-probe", "--requests", "4")
    with harness("--ttft-ms", "5", "--tpot-ms", "1", model="harness-smoke") as (base, _):
        for name in ("a", "b"):
            run = harness_run_record(lab, home, base, "harness-smoke", digest=DIGEST)
            done = labctl(world, "bench", "run", run, *args, "--json")
            assert done.code == 0, done.stderr
            world[name], world[name + "_run"] = json.loads(done.stdout)["bench_id"], run
    for name in ("a", "b"):
        path = next(home.glob(f"runs/*/bench/{world[name]}.json"))
        result = json.loads(path.read_text())
        result["workload"]["name"] = HOSTILE + "<script>alert(1)</script> | x"
        result["target"]["model"] = HOSTILE
        path.write_text(json.dumps(result))
        record_path = Runs(home).record_path(world[name + "_run"])
        record = json.loads(record_path.read_text())
        record["served_model_name"] = HOSTILE
        record_path.write_text(json.dumps(record))
    return world


def assert_inert(text: str) -> None:
    assert "\x1b" not in text and "\r" not in text and "\\x1b[2J" in text
    assert not any(line.startswith("FAKE") for line in text.splitlines()), text


pytestmark = pytest.mark.process  # the CLI and the harness engine as local processes (the unit test above aside)


def test_bench_list_and_show_escape_a_result_field(world: dict[str, Any]) -> None:
    listed = labctl(world, "bench", "list", world["a_run"])
    assert listed.code == 0, listed.stderr
    assert_inert(listed.stdout)
    shown = labctl(world, "bench", "show", world["a"])
    assert shown.code == 0, shown.stderr
    assert_inert(shown.stdout)


def test_compare_escapes_result_fields_on_the_terminal_and_keeps_them_as_data_in_json(world: dict[str, Any]) -> None:
    table = labctl(world, "compare", world["a"], world["b"], "--allow-mismatch")
    assert table.code == 0, table.stderr
    assert_inert(table.stdout)
    as_json = labctl(world, "compare", world["a"], world["b"], "--allow-mismatch", "--json")
    assert as_json.code == 0 and "\x1b" not in as_json.stdout
    assert json.loads(as_json.stdout)["rows"][0]["workload"].startswith(HOSTILE)


def test_show_escapes_a_served_model_name_from_a_record(world: dict[str, Any]) -> None:
    shown = labctl(world, "show", world["a_run"])
    assert shown.code == 0, shown.stderr
    assert_inert(shown.stdout)


def test_report_md_escapes_html_and_pipes(world: dict[str, Any], tmp_path: Path) -> None:
    for ids, name in (([world["a"]], "one"), ([world["a"], world["b"]], "two")):
        done = labctl(world, "report", *ids, "--allow-mismatch", "-o", str(tmp_path / name))
        assert done.code == 0, done.stderr
        text = (tmp_path / name / "report.md").read_text()
        assert "<script>" not in text and "&lt;script&gt;" in text and "\x1b" not in text
        assert "\\| x" in text  # a | from a file cannot open a table cell
        assert not any(line.startswith("FAKE") for line in text.splitlines())
        page = (tmp_path / name / "index.html").read_text()
        own = page.count('<script type="application/json" id=ex-data>') + page.count("<script>\n(function")
        assert page.count("<script") == own == 2  # the explorer's data and code only: nothing a file put there


@pytest.mark.parametrize("served", ["smoke\x1b[31m", "smoke\nFAKE", "smoke\u202etxt"], ids=["esc", "newline", "bidi"])
def test_a_profile_whose_served_model_name_has_control_characters_is_refused(
    world: dict[str, Any], served: str
) -> None:
    folder = world["lab"] / "engines" / "harness" / "profiles"
    spec = yaml.safe_load((folder / "smoke.yaml").read_text())
    (folder / "hostile.yaml").write_text(yaml.safe_dump({**spec, "served_model_name": served}))
    try:
        refused = labctl(world, "validate", "harness", "--profile", "hostile")
        assert refused.code == 2, refused.stdout + refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert "served_model_name" in line and "\x1b" not in line
    finally:
        (folder / "hostile.yaml").unlink()


@pytest.mark.parametrize("label", ["lab\x1b[2J", "lab\nFAKE"], ids=["esc", "newline"])
def test_an_environment_label_with_control_characters_is_refused(world: dict[str, Any], label: str) -> None:
    refused = labctl(
        world,
        "bench",
        "run",
        "--base-url",
        "http://127.0.0.1:47999/v1",
        "--model",
        "m",
        "--workload",
        "latency-probe",
        "--environment-label",
        label,
    )
    assert refused.code == 2, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert "--environment-label" in line and "\x1b" not in line


def test_an_error_quoting_a_hostile_value_is_inert(world: dict[str, Any]) -> None:
    refused = labctl(world, "bench", "show", "b" + HOSTILE)
    assert refused.code != 0 and "\x1b" not in refused.stderr and "\r" not in refused.stderr
