"""The documented exit codes are the ones labctl uses: the table names every code of the error family and the
interruption codes, and nothing else."""

from __future__ import annotations

import re
import signal

from helpers.support import REPO

from labctl import errors

TABLE = REPO / "docs" / "reference" / "exit-codes.md"


def test_the_table_holds_exactly_the_codes_labctl_exits_with() -> None:
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", TABLE.read_text(), re.MULTILINE)}
    family = {errors.EXIT_FAILURE, errors.EXIT_BAD_INPUT, errors.EXIT_CONFLICT}
    interrupted = {128 + signal.SIGHUP, 128 + signal.SIGINT, 128 + signal.SIGTERM}
    assert documented == {0} | family | interrupted
