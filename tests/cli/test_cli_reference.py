"""The README's command table is the CLI's own help; every command is documented with an example."""

from __future__ import annotations

import re

from helpers.support import REPO

from labctl.cli import app
from labctl.cli.reference import command_table, readme_with_table


def test_readme_command_table_matches_the_cli() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme_with_table(readme, command_table(app)) == readme, "README's command table is stale: run make readme"


def test_every_command_has_help_and_an_example() -> None:
    for line in command_table(app).splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1], f"{cells[0]} has no help"
        assert re.fullmatch(r"`labctl .+`", cells[2]), f"{cells[0]} has no Example: line"
