"""Every environment variable labctl reads is in one table, and each command's --help names the ones that
affect it (typer's envvar= where an option stands for the variable); the reference page is that table."""

from __future__ import annotations

import ast
from pathlib import Path

import typer
from helpers.package_source import parsed
from helpers.support import REPO
from typer.testing import CliRunner

from labctl.cli import app
from labctl.cli.environment import EVERY, VARIABLES, affecting, reference_page
from labctl.cli.reference import _commands
from labctl.errors import BadInput

# Read inside containers labctl starts, never from a user's shell: the persona engine, the harness engine's key,
# the Slurm job script's own marker.
INSIDE = {
    "LABCTL_PERSONA_CONTRACT",
    "LABCTL_PERSONA_VERSION",
    "LABCTL_PERSONA_WARMUP_S",
    "LABCTL_PERSONA_LOAD_S",
    "LABCTL_PERSONA_ENGINES",
    "LABCTL_HARNESS_API_KEY",
    "LABCTL_SLURM_JOB",
}
ROOT = typer.main.get_command(app)
COMMANDS = {path.removeprefix("labctl "): command for path, command in _commands(ROOT, "labctl", groups=True)}


def _help(*path: str) -> str:
    """As `labctl PATH --help` prints it, from the command built once (building the app is most of a --help)."""
    command = COMMANDS[" ".join(path)] if path else ROOT
    ctx = command.context_class(command, info_name=" ".join(("labctl", *path)), terminal_width=200)
    return " ".join(command.get_help(ctx).split())


def _is_environ(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def names_read(path: Path) -> set[str]:
    """Variables a module reads: os.environ.get(X), os.environ[X], os.getenv(X), X a literal or a module constant."""
    tree = parsed(path)
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    keys: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if (node.func.attr == "get" and _is_environ(node.func.value)) or node.func.attr == "getenv":
                keys.append(node.args[0])
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
            keys.append(node.slice)
    found = set()
    for key in keys:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.add(key.value)
        elif isinstance(key, ast.Name) and key.id in constants:
            found.add(constants[key.id])
    return found


def test_every_variable_labctl_reads_is_in_the_table() -> None:
    read = set()
    for path in sorted((REPO / "labctl").rglob("*.py")):
        if path.relative_to(REPO / "labctl").parts[0] != "harness":  # the harness engine's own program
            read |= names_read(path)
    assert "LABCTL_HOST_TIMEOUT_S" in read and "LABCTL_LOCK_FILE" in read  # the scan finds both spellings
    listed = {v.name for v in VARIABLES}
    missing = {name for name in read if name.startswith(("LABCTL_", "XDG_")) or name in ("HF_ENDPOINT", "HF_TOKEN")}
    assert sorted(missing - listed - INSIDE) == []
    assert len(listed) == len(VARIABLES)


def test_the_table_names_only_commands_that_exist() -> None:
    for variable in VARIABLES:
        for path in variable.commands:
            assert path == EVERY or path in COMMANDS, f"{variable.name}: no command {path!r}"


def test_each_commands_help_names_the_variables_that_affect_it() -> None:
    assert _help("status") == " ".join(
        CliRunner().invoke(app, ["status", "--help"], prog_name="labctl", terminal_width=200).output.split()
    )  # the help read below is what the command prints
    every = {v.name for v in VARIABLES}
    for path in COMMANDS:
        text = _help(*path.split())
        own = affecting(path)
        for variable in own:
            assert f"{variable.name}: {' '.join(variable.what.split()[:3])}" in text, (path, variable.name)
        assert not {name for name in every - {v.name for v in own} if f"{name}:" in text}, path


def test_labctl_help_names_every_variable_and_the_options_show_theirs() -> None:
    text = _help()
    for variable in VARIABLES:
        assert variable.name in text
    for option, name in (("--lab", "LABCTL_LAB"), ("--home", "LABCTL_HOME"), ("--debug", "LABCTL_DEBUG")):
        after = text[text.index(f"{option} ") :]
        assert f"[env var: {name}]" in after[: after.index("--", 3)], option
    assert "[env var: LABCTL_CACHE_DIR]" in _help("up") and "[env var: LABCTL_CACHE_DIR]" in _help("fetch")


def test_a_variable_stands_in_for_its_option_and_the_option_wins(tmp_path: Path) -> None:
    runner = CliRunner()
    gone = tmp_path / "nowhere"
    by_variable = runner.invoke(app, ["engines"], env={"LABCTL_LAB": str(gone)}, prog_name="labctl")
    assert isinstance(by_variable.exception, BadInput)
    assert f"LABCTL_LAB {gone} is not a lab folder" in str(by_variable.exception)
    by_option = runner.invoke(app, ["--lab", str(gone), "engines"], env={"LABCTL_LAB": str(REPO)}, prog_name="labctl")
    assert isinstance(by_option.exception, BadInput) and f"--lab {gone} is not a lab folder" in str(by_option.exception)


def test_the_reference_page_is_the_table() -> None:
    committed = (REPO / "docs" / "reference" / "environment.md").read_text(encoding="utf-8")
    assert committed == reference_page(), "docs/reference/environment.md is stale: run make reference"
