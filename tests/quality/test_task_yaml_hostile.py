"""A lab's lm-eval task set runs no code on the host (issue 38, class 3). Each hostile task.yaml plants a marker
file its code would create; `labctl suites` (the listing) and `labctl suites lm-eval:X --answer-map` (which has
lm-evaluation-harness build every prompt) must refuse it in one line, exit 2, and leave no marker behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.records import copy_lab
from helpers.support import REPO, run_labctl

pytestmark = pytest.mark.process

FIXTURE = REPO / "tests" / "fixtures" / "lm-eval" / "gsm-mini"
# A checks.py that announces its import: were it ever imported on the host, the marker would exist.
PLANTED = "import pathlib\npathlib.Path({marker!r}).write_text('imported')\ndef evil(doc, results):\n    return {{}}\n"


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    lab = copy_lab(tmp_path)
    folder = lab / "suites" / "lm-eval" / "evil"
    shutil.copytree(FIXTURE, folder)
    marker = tmp_path / "MARKER"
    (folder / "checks.py").write_text(PLANTED.format(marker=str(marker)))
    return {"lab": lab, "folder": folder, "marker": marker, "home": tmp_path / "home", "root": tmp_path}


def task_with(world: dict[str, Path], *lines: str, replace: tuple[str, str] | None = None) -> None:
    path = world["folder"] / "task.yaml"
    text = path.read_text()
    if replace:
        assert replace[0] in text
        text = text.replace(*replace)
    path.write_text(text + "".join(f"{line}\n" for line in lines))


def answer_map(world: dict[str, Path]) -> tuple[int, str, str]:
    done = run_labctl(
        "suites", "lm-eval:evil", "--answer-map", lab=world["lab"], env={"LABCTL_HOME": str(world["home"])}
    )
    return done.code, done.stdout, done.stderr


def refused(world: dict[str, Path], *said: str) -> str:
    code, _, err = answer_map(world)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert all(s in err for s in said), err
    assert not world["marker"].exists(), "the lab's code ran on the host"
    listing = run_labctl("suites", lab=world["lab"], env={"LABCTL_HOME": str(world["home"])})
    assert "Traceback" not in listing.stderr and not world["marker"].exists(), listing.stderr
    return err


def test_the_fixture_itself_answers(world: dict[str, Path]) -> None:
    code, out, err = answer_map(world)
    assert code == 0, err
    assert len(json.loads(out)) == 12 and not world["marker"].exists()


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("process_results: !function checks.evil", "`!function checks.evil` would run the lab's Python"),
        ("process_results: !function os.system", "`!function os.system`"),
        ("process_results: !function /tmp/x.evil", "`!function /tmp/x.evil`"),
        ("process_results: !!python/object/apply:os.system ['true']", "the tag tag:yaml.org,2002:python/object/apply"),
        ("custom_dataset: !function checks.evil", "custom_dataset"),
    ],
)
def test_a_function_tag_imports_nothing_from_the_lab(world: dict[str, Path], line: str, said: str) -> None:
    task_with(world, line)
    refused(world, "suites/lm-eval/evil/task.yaml", said)


def test_a_function_tag_in_a_filter_imports_nothing(world: dict[str, Path]) -> None:
    task_with(
        world, replace=('- function: "take_first"', '- function: "custom"\n        filter_fn: !function checks.evil')
    )
    refused(world, "`!function checks.evil`", "filter_list")


def test_an_include_stays_in_the_task_folder(world: dict[str, Path]) -> None:
    outside = world["root"] / "outside.yaml"
    outside.write_text("process_results: !function checks.evil\n")
    task_with(world, "include: ../../../../outside.yaml")
    refused(world, "include:", "beside the task.yaml")
    task_with(world, replace=("include: ../../../../outside.yaml", "include: linked.yaml"))
    (world["folder"] / "linked.yaml").symlink_to(outside)
    refused(world, "linked.yaml leads outside the task set's folder")
    (world["folder"] / "linked.yaml").unlink()
    task_with(world, replace=("include: linked.yaml", f"include: {outside}"))
    refused(world, "include:")


def test_an_include_beside_the_task_is_merged_and_its_function_checked_too(world: dict[str, Path]) -> None:
    (world["folder"] / "base.yaml").write_text("description: from the include\nrepeats: 1\n")
    task_with(world, "include: base.yaml")
    code, out, err = answer_map(world)
    assert code == 0 and len(json.loads(out)) == 12, err
    (world["folder"] / "base.yaml").write_text("process_results: !function checks.evil\n")
    refused(world, "base.yaml", "`!function checks.evil`")
    (world["folder"] / "base.yaml").write_text("include: task.yaml\n")
    refused(world, "includes itself")


@pytest.mark.parametrize(
    "template",
    [
        "{{ cycler.__init__.__globals__.os.system('touch MARKER') }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ lipsum.__globals__['os'].popen('touch MARKER').read() }}",
        "{% set x = namespace() %}{{ x.__init__.__globals__ }}",
    ],
)
def test_a_template_reaches_no_python(world: dict[str, Path], template: str) -> None:
    task_with(
        world,
        replace=('doc_to_text: "Question: {{question}}\\nAnswer:"', f'doc_to_text: "{template.replace("MARKER", str(world["marker"]))}"'),
    )  # fmt: skip
    code, _, err = answer_map(world)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "could not build its prompts" in err and ("SecurityError" in err or "Undefined" in err), err
    assert not world["marker"].exists(), "a template ran a command on the host"


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("  - metric: ../../evil_metric\n    aggregation: mean", "metric_list[0].metric"),
        ("  - metric: bleu\n    hf_evaluate: true", "metric_list[0].hf_evaluate"),
    ],
)
def test_a_metric_loads_no_script(world: dict[str, Path], entry: str, said: str) -> None:
    task_with(world, replace=("metric_list:\n", f"metric_list:\n{entry}\n"))
    refused(world, said)
