"""The README's command table, generated from the CLI's own help so that the two cannot drift
(`make readme` writes it; a test keeps them equal)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

START, END = "<!-- commands:start -->", "<!-- commands:end -->"


# typer's click is vendored and private: commands and parameters are read by what they have, not their class.
def _commands(group: Any, prefix: str) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    ctx = group.context_class(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        path = f"{prefix} {name}"
        if hasattr(command, "list_commands"):
            found += _commands(command, path)
        else:
            found.append((path, command))
    return found


def _usage(path: str, command: Any) -> str:
    words = [path]
    options = [p for p in command.params if p.param_type_name == "option" and not p.hidden]
    for param in command.params:
        if param.param_type_name == "argument":
            name = (param.metavar or param.name or "ARG").upper()
            words.append(name if param.required else f"[{name}]")
    words += [f"{p.opts[0]} {p.name.upper()}" for p in options if p.required]
    if any(not p.required for p in options):
        words.append("[OPTIONS]")
    return " ".join(words)


def command_table(app: typer.Typer) -> str:
    root = typer.main.get_command(app)
    rows = ["| command | what it does | example |", "|---|---|---|"]
    for path, command in _commands(root, "labctl"):
        help_text = (command.help or "").strip()
        summary = help_text.splitlines()[0] if help_text else ""
        example = re.search(r"^\s*Example:\s*(.+)$", help_text, re.M)
        rows.append(f"| `{_usage(path, command)}` | {summary} | `{example.group(1).strip() if example else ''}` |")
    return "\n".join(rows)


def readme_with_table(readme: str, table: str) -> str:
    if START not in readme or END not in readme:
        raise ValueError(f"README.md has no {START} … {END} block")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}\n{END}{tail}"


def write_readme(app: typer.Typer, path: Path) -> bool:
    """Rewrite the table in README.md; returns whether anything changed."""
    old = path.read_text(encoding="utf-8")
    new = readme_with_table(old, command_table(app))
    if new != old:
        path.write_text(new, encoding="utf-8")
    return new != old
