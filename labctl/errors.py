"""The one exception family labctl raises; the CLI turns it into `Error: …` and an exit code."""

from __future__ import annotations

EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_CONFLICT = 3


class LabctlError(Exception):
    """Something went wrong; the message says what, where, and what to do next."""

    exit_code = EXIT_FAILURE


class BadInput(LabctlError):
    """The user's input (a file, a flag, an argument) is wrong. Nothing was started or written."""

    exit_code = EXIT_BAD_INPUT


class Conflict(LabctlError):
    """A resource (a GPU, a port) is held by someone else."""

    exit_code = EXIT_CONFLICT


def describe_error(exc: BaseException) -> str:
    """One line for an error met on the way: an OSError names its file (`No space left on device: PATH`)."""
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc.strerror or exc)
    return str(exc)
