"""A hosts file or the user's settings file of the wrong shape is one line naming the file, the line and
the field, exit 2, for every command that reads it; never a traceback, never a silent default."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers.support import LABCTL, run_labctl

pytestmark = pytest.mark.process  # the CLI as a subprocess

HOSTILE_HOSTS = {
    "a host whose docker is a number": ("hosts:\n  h100-a:\n    docker: 5\n", "hosts.h100-a.docker"),
    "hosts that are a list": ("hosts:\n  - h100-a\n", "hosts"),
    "a host that is null": ("hosts:\n  h100-a:\n", "hosts.h100-a"),
    "a default that is a mapping": ("hosts: {}\ndefault: {a: 1}\n", "default"),
    "a host name with a control character": ('hosts:\n  "a\\x1bb":\n    docker: local\n', "hosts"),
    "a file that is a list": ("- hosts\n", ""),
    "a deep bomb": ("hosts: " + "[" * 5000 + "]" * 5000 + "\n", ""),
    "a unified memory of 1e400": (
        "hosts:\n  g:\n    docker: ssh://a@b\n    unified_memory_gib: 1e400\n",
        "hosts.g.unified_memory_gib",
    ),
    "a GPU-hour price of 0": ("hosts:\n  g:\n    docker: ssh://a@b\n    gpu_hour_price: 0\n", "hosts.g.gpu_hour_price"),
    "a GPU-hour price that is text": (
        "hosts:\n  g:\n    docker: ssh://a@b\n    gpu_hour_price: cheap\n",
        "hosts.g.gpu_hour_price",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE_HOSTS))
def test_a_hosts_file_of_the_wrong_shape_is_one_line(tmp_path: Path, case: str) -> None:
    text, field = HOSTILE_HOSTS[case]
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(text)
    for args in (("hosts",), ("status", "--json")):
        done = run_labctl(*args, env={"LABCTL_HOSTS": str(hosts), "LABCTL_HOME": str(tmp_path / "home")})
        assert (done.code, done.stdout) == (2, ""), (args, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and str(hosts) in done.stderr and field in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "\x1b" not in done.stderr


@pytest.mark.parametrize(
    "text, field",
    [("lab: 5\n", "lab"), ("lab: [a]\n", "lab"), ("- lab\n", ""), ("lab: {x: 1}\n", "lab")],
)
def test_a_settings_file_of_the_wrong_shape_is_one_line(tmp_path: Path, text: str, field: str) -> None:
    config = tmp_path / "config" / "labctl" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(text)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "LABCTL_LAB"}
    env |= {"XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(elsewhere)}
    done = subprocess.run([*LABCTL, "profiles"], capture_output=True, text=True, env=env, cwd=elsewhere, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stdout + done.stderr
    assert str(config) in done.stderr and field in done.stderr and "Traceback" not in done.stderr
