"""labctl's command line: a thin typer layer over the library. Commands import what they need
inside the function, so `labctl --help` stays fast."""

from __future__ import annotations

import signal
import sys
from typing import Annotated

import typer

from labctl.cli import bench, catalog, environment, fetch, hosts, init, quality, reproduce, runs, schemas, study
from labctl.cli.context import complete_host, state
from labctl.cli.terminal import inert

app = typer.Typer(
    name="labctl",
    help="Run LLM inference engines in a GPU lab so that every number can be trusted and every setup rebuilt.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from labctl import __version__

        print(f"labctl {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print labctl's version and exit."),
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", envvar="LABCTL_DEBUG", help="Show tracebacks.")] = False,
    lab: Annotated[
        str | None,
        typer.Option(
            "--lab",
            envvar="LABCTL_LAB",
            help="The lab folder (default: $LABCTL_LAB, else the nearest parent of this folder holding engines/ "
            "and templates/, else your default lab from `labctl init`, else the read-only lab that ships with labctl).",
        ),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            autocompletion=complete_host,
            help="The Docker host to drive (see `labctl hosts`; default: local).",
        ),
    ] = None,
    home: Annotated[
        str | None,
        typer.Option(
            "--home",
            envvar="LABCTL_HOME",
            help="Where runs/ live (default: $LABCTL_HOME, else the lab folder; for the lab that ships with "
            "labctl, $XDG_DATA_HOME/labctl or ~/.local/share/labctl).",
        ),
    ] = None,
) -> None:
    state.debug = debug
    # The lab search names where it found the lab ("LABCTL_LAB=…" or "--lab …") and reads the variable itself.
    source = ctx.get_parameter_source("lab")
    state.lab_option = lab if source is not None and source.name == "COMMANDLINE" else None
    state.home_option = home
    state.host_option = host


init.register(app)
catalog.register(app)
runs.register(app)
fetch.register(app)
reproduce.register(app)
bench.register(app)
quality.register(app)
hosts.register(app)
study.register(app)
schemas.register(app)
environment.annotate(app)


_signalled: list[int] = []  # the signal that interrupted the command: its exit code is 128 + it (SIGTERM 143)


def _interrupt(signum: int, _frame: object) -> None:
    """SIGTERM (what `timeout`, CI and service managers send) and SIGHUP (a closed terminal) take the same
    path as Ctrl-C: whatever was started is stopped and its record says so."""
    _signalled.append(signum)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _interrupted_code() -> int:
    return 128 + (_signalled[0] if _signalled else signal.SIGINT)


def main() -> None:
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    # A shell without job control starts `cmd &` with SIGINT ignored, and Python then installs no
    # Ctrl-C handler: an explicit SIGINT to labctl would be lost and `up` would run on. Take it back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from typer.exceptions import TyperException

    from labctl.errors import LabctlError

    try:
        code = app(standalone_mode=False, prog_name="labctl")
    except LabctlError as exc:
        if state.debug:
            raise
        print(f"Error: {inert(str(exc))}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except PermissionError as exc:  # another user's file in a home or key store several users share
        if state.debug:
            raise
        print(
            f"Error: permission denied on {exc.filename or exc}: it belongs to another user. Use a --home you "
            "can write, or ask its owner to share it with the docker group (chgrp -R docker; chmod -R g+rwX).",
            file=sys.stderr,
        )
        sys.exit(1)
    except OSError as exc:  # a full disk, a read-only or vanished folder: one line, the traceback with --debug
        if state.debug:
            raise
        print(
            inert(f"Error: {exc.strerror or exc} on {exc.filename or 'a file'} (rerun with --debug for details)."),
            file=sys.stderr,
        )
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:  # click turns a KeyboardInterrupt (Ctrl-C, or SIGTERM/SIGHUP above) into Abort
        print("Aborted.", file=sys.stderr)
        sys.exit(_interrupted_code())
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        sys.exit(_interrupted_code())
    except TyperException as exc:  # usage errors: a wrong option, a missing argument
        show = getattr(exc, "show", None)
        if show is None:
            raise
        show()
        sys.exit(int(getattr(exc, "exit_code", 2)))
    if isinstance(code, int) and code:
        if code == 130:  # typer turns a KeyboardInterrupt into Exit(130): SIGTERM's is 143, SIGHUP's 129
            print("Interrupted.", file=sys.stderr)
            code = _interrupted_code()
        sys.exit(code)
    if state.skipped:  # each bad entry was said on its own line; everything else was done
        sys.exit(1)
