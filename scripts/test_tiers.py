"""Run the test tiers side by side, then the exclusive tests alone, and say what each took.

    python scripts/test_tiers.py [-k EXPR] [--workers N] [PYTEST_ARGS...]

The tiers share nothing that one test could break for another (tests/conftest.py says which test is in
which): unit and process tests spread over N workers (pytest-xdist, file by file); the docker tier (labctl
runs on the main daemon), the docker-own tier (the main daemon too, but only containers of the tests' own: the
sandbox, the personas, the provisioning scripts' instances), the lab tier (the simulated GPU lab, other
daemons), the labb tier (the remote lab host labb), the slurm tier (the Slurm test cluster, daemons of its own)
and the real_engine tier (the vLLM CPU
image, tests/real/; it builds the image and the tiny models first, while the others already test) each run one
test at a time, beside each other; so does `make check docs dist` (format, lint, types, the docs site and the
distribution), which no test waits for. Exclusive tests (they restart the main Docker daemon) run last, alone.

Each tier's output goes to build/test-logs/TIER.log; a tier that fails has its log printed. The run ends
with each tier's wall time, the 15 slowest tests, and one line with the totals. Exit status: 0 when every
tier passed, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOGS = REPO / "build" / "test-logs"
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


@dataclass
class Tier:
    name: str
    marks: str
    args: list[str] = field(default_factory=list)
    started: float = 0.0
    seconds: float = 0.0
    code: int | None = None
    process: subprocess.Popen[bytes] | None = None
    filtered: bool = False  # arguments were given (-k, paths): a tier may then have no test at all (exit 5)
    # Set-up only this tier needs, run first (into its log) while the other tiers already test: the real-engine
    # tier's image build is minutes of downloads and layers that no other tier waits for.
    prepare: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)  # not pytest: a tier of checks that are not tests

    @property
    def log(self) -> Path:
        return LOGS / f"{self.name}.log"

    @property
    def times(self) -> Path:
        return LOGS / f"{self.name}.times.jsonl"

    def start(self, extra: list[str]) -> None:
        self.filtered = bool(extra)
        self.log.unlink(missing_ok=True)
        self.times.unlink(missing_ok=True)
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", self.marks, *self.args, *extra]
        command = self.command or pytest
        env = {**os.environ, "LABCTL_TEST_TIMES": str(self.times)}
        if self.prepare:  # the tests run only if the set-up succeeded; both go to the tier's log
            command = ["sh", "-c", f'{shlex.join(self.prepare)} && exec "$@"', "prepare", *command]
        shown = command if self.command else command[1:]  # a pytest tier without the interpreter's path
        print(f"tests: {self.name} started ({' '.join(shown)})", flush=True)
        self.started = time.monotonic()
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)

    def poll(self) -> bool:
        assert self.process is not None
        if self.code is None and (code := self.process.poll()) is not None:
            self.code, self.seconds = code, time.monotonic() - self.started
            print(f"tests: {self.name} finished in {self.seconds:.0f} s: {self.summary()}", flush=True)
        return self.code is not None

    def summary(self) -> str:
        if self.command:
            return "passed" if self.code == 0 else f"failed (exit {self.code})"
        lines = [line for line in self.log.read_text(errors="replace").splitlines() if COUNTS.search(line)]
        return lines[-1].strip("= ") if lines else f"no summary (exit {self.code})"

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for number, word in COUNTS.findall(self.summary()):
            word = "errors" if word.startswith("error") else word
            found[word] = found.get(word, 0) + int(number)
        return found

    @property
    def passed(self) -> bool:
        return self.code == 0 or (self.code == 5 and self.filtered)


def wait(tiers: list[Tier]) -> None:
    while not all([tier.poll() for tier in tiers]):  # a list: every tier is polled, so each is timed when it ends
        time.sleep(0.5)


def failure_text(tier: Tier) -> str:
    text = tier.log.read_text(errors="replace")
    start = text.find("= FAILURES =")
    if start < 0:
        start = text.find("= ERRORS =")
    return text[text.rfind("\n", 0, start) + 1 :] if start >= 0 else text


def failed_tests(tier: Tier) -> list[str]:
    """The short test summary's FAILED and ERROR lines of a tier's log (pytest -q prints them last)."""
    lines = tier.log.read_text(errors="replace").splitlines()
    return [f"{line} [{tier.name}]" for line in lines if line.startswith(("FAILED ", "ERROR "))]


def slowest(tiers: list[Tier], count: int) -> list[str]:
    rows = []
    for tier in tiers:
        if tier.times.is_file():
            for line in tier.times.read_text().splitlines():
                entry = json.loads(line)
                rows.append((entry["duration"], entry["when"], entry["nodeid"], tier.name))
    rows.sort(reverse=True)
    return [f"{d:8.2f}s {when:8} {nodeid} [{name}]" for d, when, nodeid, name in rows[:count]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="xdist workers for the unit and process tiers")
    options, extra = parser.parse_known_args()
    LOGS.mkdir(parents=True, exist_ok=True)
    spread = ["-n", str(options.workers), "--dist", "loadfile"] if options.workers > 1 else []
    side_by_side = [
        Tier("unit+process", "(unit or process) and not exclusive", spread),
        Tier("docker", "docker and not own_containers and not lab and not slurm and not exclusive and not real_engine"),
        # Tests whose containers are their own (no labctl run, claim, lock or status on the main daemon) beside them.
        Tier("docker-own", "docker and own_containers and not lab and not slurm and not exclusive and not real_engine"),
        # The simulated GPU hosts' tests and labb's: different daemons, so the two run beside each other.
        Tier("lab", "lab and not labb and not slurm and not exclusive and not real_engine"),
        Tier("labb", "labb and not slurm and not exclusive and not real_engine"),
        Tier("slurm", "slurm and not exclusive"),
        # A real vLLM on CPU: one server per module (a ~35 s cold start each), one test at a time.
        Tier("real_engine", "real_engine and not exclusive", prepare=["make", "vllm-cpu-image", "tiny-models"]),
    ]
    if not extra:  # format, lint, types, the docs site and the distribution: checks no test waits for, run beside them
        side_by_side.append(Tier("static", "", command=["make", "--no-print-directory", "check", "docs", "dist"]))
    alone = [Tier("exclusive", "exclusive")]
    began = time.monotonic()
    for tier in side_by_side:
        tier.start(extra)
    wait(side_by_side)
    for tier in alone:
        tier.start(extra)
        wait([tier])
    tiers = side_by_side + alone
    for tier in tiers:
        if not tier.passed:
            print(f"\n===== {tier.name}: exit {tier.code} ({tier.log.relative_to(REPO)}) =====\n{failure_text(tier)}")
    print("\n===== time per tier =====")
    for tier in tiers:
        print(f"{tier.name:13} {tier.seconds:7.1f} s  {tier.summary()}")
    print(
        f"{'all':13} {time.monotonic() - began:7.1f} s  (the first {len(side_by_side)} side by side, then exclusive alone)"
    )
    print("\n===== the 15 slowest test phases =====")
    print("\n".join(slowest(tiers, 15)))
    total: dict[str, int] = {}
    for tier in tiers:
        for word, number in tier.counts().items():
            total[word] = total.get(word, 0) + number
    failed = total.get("failed", 0) + total.get("errors", 0)
    print(f"\ntotal: {total.get('passed', 0)} passed, {failed} failed, {total.get('skipped', 0)} skipped")
    bad = [f"{tier.name} (exit {tier.code})" for tier in tiers if not tier.passed]
    failures = [line for tier in tiers if not tier.passed for line in failed_tests(tier)]
    if failures:  # last, where a CI page that shows only the tail still names them
        print("failed:\n" + "\n".join(f"  {line[:300]}" for line in failures))
    if bad:
        print(f"tiers that did not pass: {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
