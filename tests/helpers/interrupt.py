"""A labctl command interrupted for real at one step: it runs in its own process, with the step it reaches
replaced by a SIGKILL of that process (or by the OSError a full disk raises there), so whatever the command
wrote before that step is all there is."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers.support import REPO

KILL = "lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)"
FULL_DISK = "lambda *a, **k: (_ for _ in ()).throw(OSError(errno.ENOSPC, 'No space left on device'))"
# A run's record cannot change status (starting, then failed): the full disk meets `up` once its engine runs.
FULL_DISK_ON_STATUS = (
    "lambda self, **k: (_ for _ in ()).throw(OSError(errno.ENOSPC, 'No space left on device')) "
    "if 'status' in k else ORIGINAL(self, **k)"
)


def interrupted(
    lab: Path, home: Path, target: str, action: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`labctl ARGS` with `target` (module:attribute) replaced by `action`, in a process of its own."""
    module, attribute = target.split(":")
    code = textwrap.dedent(
        f"""
        import errno, importlib, os, signal, sys
        owner = importlib.import_module({module!r})
        *path, name = {attribute!r}.split(".")
        for part in path:
            owner = getattr(owner, part)
        ORIGINAL = getattr(owner, name)
        setattr(owner, name, {action})
        from labctl.cli import main
        sys.argv = ["labctl", *{list(args)!r}]
        main()
        """
    )
    full = {**os.environ, "LABCTL_HOME": str(home), "LABCTL_LAB": str(lab), **(env or {})}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=REPO, timeout=180)
