"""The CLI reference page is the CLI's own help; every command is documented with an example, every option
has help."""

from __future__ import annotations

import re

import typer
from helpers.support import REPO

from labctl.cli import app
from labctl.cli.reference import command_table, reference_page

PAGE = REPO / "docs" / "reference" / "cli.md"


def test_the_reference_page_matches_the_cli() -> None:
    committed = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    assert committed == reference_page(app), "docs/reference/cli.md is stale: run make reference"


def test_every_command_has_help_and_an_example() -> None:
    for line in command_table(app).splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        assert cells[1], f"{cells[0]} has no help"
        assert re.fullmatch(r"`labctl .+`", cells[2]), f"{cells[0]} has no Example: line"


def test_every_option_and_argument_has_help() -> None:
    def undocumented(command: typer.core.TyperGroup | typer.core.TyperCommand, path: str) -> list[str]:
        found = [f"{path} {p.name}" for p in command.params if not getattr(p, "hidden", False) and not p.help]
        if isinstance(command, typer.core.TyperGroup):
            ctx = command.context_class(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if isinstance(sub, typer.core.TyperGroup | typer.core.TyperCommand) and not sub.hidden:
                    found += undocumented(sub, f"{path} {name}")
        return found

    assert undocumented(typer.main.get_command(app), "labctl") == []


def test_the_page_links_every_command_to_its_section() -> None:
    page = reference_page(app)
    for anchor in re.findall(r"\]\(#([a-z0-9-]+)\)", page):
        assert f"{{#{anchor}}}" in page, f"#{anchor} has no section"
