"""Who runs labctl and on which machine, from the operating system (never from environment variables,
which anyone can set: `USER=alice labctl down …` must not pass as alice)."""

from __future__ import annotations

import os
import pwd
import socket


def current_user() -> str:
    """The name of the effective uid, from the password database; the uid itself if it has no entry."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def host_name() -> str:
    return socket.gethostname()
