"""Command groups whose old one-command spellings still work for one release (hidden aliases):
`labctl bench RUN …` means `bench run RUN …`, `bench --list RUN` means `bench list RUN`, and so on."""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup


class GroupWithDefault(TyperGroup):
    default_command = "run"
    legacy_flags: dict[str, str] = {"--list": "list", "--show": "show", "--diff": "diff"}

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            for flag, command in self.legacy_flags.items():
                if flag in args and command in self.commands:
                    at = args.index(flag)
                    args = [command, *args[:at], *args[at + 1 :]]
                    break
            else:
                args = [self.default_command, *args]
        result: list[str] = super().parse_args(ctx, args)
        return result
