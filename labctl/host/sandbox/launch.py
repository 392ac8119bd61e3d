"""Running model-written code: never in labctl's own process, and never in the process that decides
its verdict.

A code case is two throwaway containers with the same limits (no network, a read-only root, a small
writable /tmp, memory/CPU/process limits, a non-root user, no capabilities). The answer's container
sees only the answer and loads it (labctl/host/sandbox/sandboxed/answer.py); the tests' container sees only
the tests and runs them (sandboxed/tester.py), calling the answer's functions through two pipes that
connect the containers' stdin and stdout: calls one way, replies the other, one JSON line each. The
tester alone writes the verdict, on its stderr. The answer's own stdout and stderr go to its
container's stderr, which is drained here and bounded: they never reach the protocol."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from labctl.errors import LabctlError
from labctl.host.docker import daemon as dk

DEFAULT_IMAGE = "labctl/base:bookworm"
PROGRAMS = Path(__file__).parent / "sandboxed"
# Two containers start on a busy 2-core machine in a few seconds; this is for Docker, not the answer.
STARTUP_S = 30.0
# What the answer may print in all: more is a flood, and the answer is stopped.
MAX_OUTPUT_BYTES = 1024 * 1024
MAX_VERDICT_BYTES = 64 * 1024
# Bumped whenever what a python check's verdict means changes (suites hash it into their version).
CHECK_VERSION = 3
LIMITS = [
    "--network=none",
    "--read-only",
    "--tmpfs=/tmp:rw,size=16m,mode=1777",
    "--memory=256m",
    "--memory-swap=256m",
    "--cpus=0.5",
    "--pids-limit=64",
    "--user=65534:65534",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
    "--workdir=/tmp",
    "--env=HOME=/tmp",
    "--init",  # the answer is never PID 1: a signal it sends itself works, and its forks are reaped
]


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


def _case_folder(root: Path, program: str, name: str, text: str) -> Path:
    folder = root / program
    package = folder / "sandboxed"
    package.mkdir(parents=True)
    for module in ("__init__.py", "wire.py", f"{program}.py"):
        shutil.copyfile(PROGRAMS / module, package / module)
    (folder / name).write_text(text, encoding="utf-8")
    for path in (folder, package, *folder.rglob("*")):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return folder


def _argv(name: str, folder: Path, program: str, *args: str) -> list[str]:
    boot = (
        f"import sys, runpy; sys.path.insert(0, '/case'); runpy.run_module('sandboxed.{program}', run_name='__main__')"
    )
    # The CLI, to feed the container's stdin (the pipes between answer and tests); always this machine's engine,
    # as for every sandbox: the case folder is a local bind mount.
    return [
        *dk.cli_argv_for(None),
        "run",
        "--interactive",
        "--rm",
        f"--name={name}",
        *LIMITS,
        f"--volume={folder}:/case:ro",
        sandbox_image(),
        "python3",
        "-I",
        "-S",
        "-c",
        boot,
        *args,
    ]


class _Drain(threading.Thread):
    """Reads a stream to its end, keeping at most `keep` bytes; past `limit` bytes, calls `over` once."""

    def __init__(self, stream: IO[bytes], keep: int, limit: int | None = None, over: Any = None) -> None:
        super().__init__(daemon=True)
        self.stream, self.keep, self.limit, self.over = stream, keep, limit, over
        self.kept, self.total, self.flooded = b"", 0, False

    def run(self) -> None:
        while chunk := self.stream.read1(65536):  # type: ignore[attr-defined]
            self.total += len(chunk)
            if len(self.kept) < self.keep:
                self.kept += chunk[: self.keep - len(self.kept)]
            if self.limit is not None and self.total > self.limit and not self.flooded:
                self.flooded = True  # stopped from another thread: Docker waits for this stream to drain
                threading.Thread(target=self.over, daemon=True).start()


def run_code(code: str, tests: str, timeout_s: float) -> SandboxResult:
    token = secrets.token_hex(4)
    names = {"answer": f"labctl-sandbox-{token}-answer", "tester": f"labctl-sandbox-{token}-tests"}
    with tempfile.TemporaryDirectory(prefix="labctl-case-") as root:
        os.chmod(root, 0o755)
        answer_dir = _case_folder(Path(root), "answer", "solution.py", code)
        tester_dir = _case_folder(Path(root), "tester", "tests.py", tests)
        calls_r, calls_w = os.pipe()
        replies_r, replies_w = os.pipe()
        procs: list[subprocess.Popen[bytes]] = []
        try:
            try:
                answer = subprocess.Popen(
                    _argv(names["answer"], answer_dir, "answer"),
                    stdin=calls_r,
                    stdout=replies_w,
                    stderr=subprocess.PIPE,
                )
                procs.append(answer)
                tester = subprocess.Popen(
                    _argv(names["tester"], tester_dir, "tester", f"{timeout_s:g}", f"{STARTUP_S:g}"),
                    stdin=replies_r,
                    stdout=calls_w,
                    stderr=subprocess.PIPE,
                )
                procs.append(tester)
            except OSError as exc:
                raise LabctlError(f"could not start the code sandbox: {exc}") from None
            finally:
                for fd in (calls_r, calls_w, replies_r, replies_w):
                    os.close(fd)
            assert answer.stderr is not None and tester.stderr is not None
            output = _Drain(answer.stderr, 2048, MAX_OUTPUT_BYTES, lambda: _remove(names["answer"]))
            verdict = _Drain(tester.stderr, MAX_VERDICT_BYTES)
            output.start()
            verdict.start()
            return _verdict(answer, tester, output, verdict, timeout_s)
        finally:
            for name in names.values():
                _remove(name)
            for proc in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.kill()
                    proc.wait(10)


def _verdict(
    answer: subprocess.Popen[bytes], tester: subprocess.Popen[bytes], output: _Drain, verdict: _Drain, timeout_s: float
) -> SandboxResult:
    limit = STARTUP_S + timeout_s + 10
    try:
        tester.wait(limit)
    except subprocess.TimeoutExpired:
        return SandboxResult(False, f"killed: the sandbox still ran after {limit:g} s")
    verdict.join(10)
    if output.flooded:
        return SandboxResult(False, f"the answer flooded its output (more than {MAX_OUTPUT_BYTES // 1024} KiB)")
    lines = verdict.kept.decode("utf-8", "replace").strip().splitlines()
    try:
        said = json.loads(lines[-1])
        passed, reason, ended = said["passed"] is True, str(said["reason"]), said.get("ended")
    except (IndexError, ValueError, KeyError, TypeError):
        docker_said = lines[-1][:200] if lines else "nothing"
        return SandboxResult(False, f"the test process gave no verdict (exit code {tester.returncode}): {docker_said}")
    if ended:
        reason = f"{_how_it_ended(answer)} {ended}"
    return SandboxResult(passed, reason)


def _how_it_ended(answer: subprocess.Popen[bytes]) -> str:
    try:
        code = answer.wait(5)
    except subprocess.TimeoutExpired:
        return "the answer closed the pipe"
    if code == 137:
        return "the answer was killed (code 137: signal 9, as the memory limit does)"
    if code > 128:
        return f"the answer was killed (code {code}: signal {code - 128})"
    return f"the answer exited (code {code})"


def _remove(name: str) -> None:
    dk.remove_local(name)
