"""The job of a one-shot client container (host/remote/client_container.py) arrives on its stdin as one line of
JSON; stdin then stays open for as long as the controller lives. Its end before the job is done means the
controller is gone (SIGKILL, a lost machine, a cut SSH link): the client stops at once instead of sending
the rest of a level into a shared GPU host, or downloading into its cache for nobody. Stdlib only: the
client image carries it."""

from __future__ import annotations

import os
import sys
import threading

CONTROLLER_GONE = 4  # the exit code of a client whose controller went away


def read_job(max_bytes: int) -> bytes | None:
    """The job line (None when it is larger than max_bytes)."""
    raw = sys.stdin.buffer.readline(max_bytes + 1)
    return None if len(raw) > max_bytes else raw


class Lifeline:
    """Ends the process when stdin closes before `done()`; started after the job line was read."""

    def __init__(self) -> None:
        self._done = threading.Event()
        threading.Thread(target=self._watch, name="lifeline", daemon=True).start()

    def done(self) -> None:
        """The last event is about to be written: a controller closing stdin now is the normal end."""
        self._done.set()

    def _watch(self) -> None:
        while os.read(sys.stdin.fileno(), 4096):
            pass
        if not self._done.is_set():
            print("labctl client: the controller went away; stopping", file=sys.stderr, flush=True)
            os._exit(CONTROLLER_GONE)
