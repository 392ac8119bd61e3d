"""Running model-written code: in a throwaway container with no network, a read-only root, a small
writable /tmp, memory/CPU/process/time limits and a non-root user; never in labctl's own process."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from python_on_whales import docker
from python_on_whales.exceptions import DockerException

from labctl.errors import LabctlError
from labctl.host import docker as dk

DEFAULT_IMAGE = "labctl/base:bookworm"
RUNNER = """import sys, traceback
source = open("/case/solution.py").read()
tests = open("/case/tests.py").read()
scope = {"__name__": "solution"}
try:
    exec(compile(source, "solution.py", "exec"), scope)
except BaseException as exc:
    print("the code does not run:", type(exc).__name__, str(exc)[:150]); sys.exit(3)
for number, line in enumerate(tests.splitlines(), 1):
    if not line.strip():
        continue
    try:
        exec(compile(line, "tests.py", "exec"), scope)
    except AssertionError:
        print(f"test line {number} failed: {line.strip()[:150]}"); sys.exit(1)
    except BaseException as exc:
        print(f"test line {number} raised {type(exc).__name__}: {str(exc)[:120]}"); sys.exit(2)
print("all tests passed")
"""


@dataclass(frozen=True)
class SandboxResult:
    passed: bool
    reason: str


def sandbox_image() -> str:
    return os.environ.get("LABCTL_SANDBOX_IMAGE", DEFAULT_IMAGE)


def check_sandbox() -> None:
    dk.check_docker()
    if dk.image_facts(sandbox_image()) is None:
        raise LabctlError(
            f"the code sandbox image {sandbox_image()} is missing: run `make docker-lab` (or set "
            "LABCTL_SANDBOX_IMAGE to an image with python3)."
        )


def run_code(code: str, tests: str, timeout_s: float) -> SandboxResult:
    with tempfile.TemporaryDirectory(prefix="labctl-case-") as folder:
        os.chmod(folder, 0o755)
        for name, text in (("solution.py", code), ("tests.py", tests), ("run.py", RUNNER)):
            path = Path(folder) / name
            path.write_text(text, encoding="utf-8")
            os.chmod(path, 0o644)
        name = f"labctl-sandbox-{secrets.token_hex(4)}"
        try:
            container = docker.run(
                sandbox_image(),
                ["python3", "-I", "-S", "/case/run.py"],
                name=name,
                detach=True,
                networks=["none"],
                read_only=True,
                tmpfs=["/tmp:rw,size=16m,mode=1777"],
                memory="256m",
                memory_swap="256m",
                cpus=0.5,
                pids_limit=64,
                user="65534:65534",
                cap_drop=["ALL"],
                security_options=["no-new-privileges"],
                volumes=[(folder, "/case", "ro")],
                workdir="/tmp",
                envs={"HOME": "/tmp"},
            )
        except DockerException as exc:
            raise LabctlError(f"could not start the code sandbox: {(exc.stderr or str(exc)).strip()[-300:]}") from None
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                state = dk.container_state(container)
                if not state["running"]:
                    break
                if time.monotonic() > deadline:
                    docker.container.kill(container)
                    return SandboxResult(False, f"killed: still running after {timeout_s:g} s")
                time.sleep(0.05)
            output = dk.logs_tail(container, 20).strip()
            code_ = state["exit_code"]
            if code_ == 0:
                return SandboxResult(True, "all tests passed")
            if code_ == 137:
                return SandboxResult(False, "killed (out of memory or a limit)")
            return SandboxResult(False, output.splitlines()[-1][:200] if output else f"exit code {code_}")
        finally:
            with contextlib.suppress(DockerException):
                docker.container.remove(container, force=True)
