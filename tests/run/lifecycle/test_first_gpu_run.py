"""What the docs and `--help` tell a user to type runs as written, on the simulated H100 host.

"Your first real GPU run" (docs/getting-started.md, and the same block in the README) runs line by line in
bash for a fresh user: init -> pin -> fetch -> up -> bench -> compare -> down, for SGLang and vLLM. Every
command's `Example:` line runs too, in an order that gives each the runs, results and files it names; the
example ids (20261203-015815-a1b2c3, b2026…, e2026…) are replaced by the ids the session made, as a user
copies them from the output. The only changes to the lab are the test's own: each engine's image is its
persona by tag (unpinned, as shipped), since the real images' registries are out of reach here, and the persona
streams a token every 2 ms instead of 20 (HARNESS_TPOT_MS, passed through the profile's `env`): nothing here is
timed, and the benches the docs type are most of the test's time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
import yaml
from helpers.sim_lab import SimUser, sim_user, simulate
from helpers.support import REPO, Result

from labctl.cli import app
from labctl.cli.reference import EXAMPLE, _commands

pytestmark = [pytest.mark.docker, pytest.mark.lab]

RUN_ID = re.compile(r"\b[be]?\d{8}-\d{6}-[0-9a-f]{6}\b")  # a run, bench (b…) or eval (e…) id


@pytest.fixture
def user(tmp_path: Path) -> Iterator[SimUser]:
    with sim_user(tmp_path) as made:
        bin_dir = made.root / "bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "labctl"
        wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m labctl "$@"\n')
        wrapper.chmod(0o755)
        made.env["PATH"] = f"{bin_dir}:{made.env['PATH']}"
        made.env["HARNESS_TPOT_MS"] = "2"
        yield made


def simulate_fast(lab: Path, engine: str, profile: str) -> None:
    """The profile's image becomes its persona (simulate), which streams at HARNESS_TPOT_MS from the user's env."""
    simulate(lab, engine, profile)
    path = lab / "engines" / engine / "profiles" / f"{profile}.yaml"
    text = path.read_text()
    assert "\nenv: [HF_TOKEN]\n" in text, path
    path.write_text(text.replace("\nenv: [HF_TOKEN]\n", "\nenv: [HF_TOKEN, HARNESS_TPOT_MS]\n"))


def shell(user: SimUser, script: str, cwd: Path, timeout: float = 900) -> Result:
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        env=user.env,
        cwd=cwd,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def first_run_block() -> list[str]:
    """The getting-started page's block under "Your first real GPU run" (the README's must be the same)."""
    page = (REPO / "docs" / "getting-started.md").read_text()
    section = page.split("## Your first real GPU run\n", 1)[1]
    lines = section.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    readme = (REPO / "README.md").read_text().split("## Your first real GPU run\n", 1)[1].split("\n## ", 1)[0]
    indented = [line[4:] for line in readme.splitlines() if line.startswith("    ")]
    assert indented == lines, "README's first real GPU run differs from docs/getting-started.md's"
    return lines


def test_the_first_real_gpu_run_runs_as_the_docs_write_it(user: SimUser) -> None:
    lines = first_run_block()
    assert lines[0].startswith("labctl init ~/lab && cd ~/lab")
    made = shell(user, lines[0], user.root)
    assert made.code == 0, made
    for engine in ("sglang", "vllm"):
        simulate_fast(user.lab, engine, "qwen3-32b")
    ran = shell(user, "\n".join(lines[1:]), user.lab)
    assert ran.code == 0, f"{ran.stdout}\n{ran.stderr}"
    for engine in ("sglang", "vllm"):
        profile = yaml.safe_load(user.profile(engine, "qwen3-32b").read_text())
        assert "@sha256:" in profile["image"] and "unpinned" not in profile
    records = [json.loads(p.read_text()) for p in sorted((user.lab / "runs").glob("*/record.json"))]
    assert [(r["engine"], r["status"]) for r in records] == [("sglang", "stopped"), ("vllm", "stopped")]
    commit = user.hub.repos["Qwen/Qwen3-32B"].commit
    assert [r["engine_setup"]["model_commit"] for r in records] == [commit, commit]
    assert "✓ model family and revision" in ran.stdout and "c=64" in ran.stdout, ran.stdout
    assert "Pin it and go on?" not in ran.stderr  # pinned by the block's own `pin` lines, never asked


def examples() -> dict[str, str]:
    """Every command's Example: line, by command path (`labctl bench run`, …)."""
    found = {}
    for path, command in _commands(typer.main.get_command(app), "labctl", groups=True):
        match = EXAMPLE.search(command.help or "")
        if match:
            found[path] = match.group(1).strip()
    return found


# The order a user could type them in; each example gets the runs, results and files the earlier ones made.
BEFORE_A_RUN = [
    "labctl init",
    "labctl engines",
    "labctl profiles",
    "labctl validate",
    "labctl render",
    "labctl workloads",
    "labctl hosts",
    "labctl hosts add",
    "labctl hosts remove",
    "labctl suites",
    "labctl schema",
    "labctl pin",
    "labctl fetch",
    "labctl study",
    "labctl study plan",
]
WITH_A_RUN = [
    "labctl up",
    "labctl status",
    "labctl runs",
    "labctl show",
    "labctl logs",
    "labctl bench",
    "labctl bench run",
    "labctl bench list",
    "labctl bench show",
    "labctl compare",
    "labctl report",
    "labctl eval",
    "labctl eval run",
    "labctl eval list",
    "labctl eval diff",
    "labctl export",
    "labctl diff",
    "labctl down",
    "labctl reproduce",
]
RESIDENT = ["labctl share", "labctl rotate-key"]  # about a resident deployment: the run id is one
AFTER = ["labctl gc", "labctl study run", "labctl study status", "labctl study report"]
SERVERS = ["labctl hub", "labctl hub serve"]  # they serve until stopped: each must say it serves, then stops
SAMPLE_IDS = {  # the example ids, and which id of the session each stands for
    "20261203-015815-a1b2c3": "run",
    "b20261203-020000-aaaaaa": "bench 1",
    "b20261203-020000-abcdef": "bench 1",
    "b20261203-021500-bbbbbb": "bench 2",
    "e20261203-020000-aaaaaa": "eval 1",
    "e20261203-030000-bbbbbb": "eval 2",
}


def as_typed(example: str, made: dict[str, str]) -> str:
    for sample in RUN_ID.findall(example):
        assert sample in SAMPLE_IDS and SAMPLE_IDS[sample] in made, f"{example}: nothing of this session is {sample}"
        example = example.replace(sample, made[SAMPLE_IDS[sample]])
    return example


def test_every_help_example_runs_as_written(user: SimUser, tmp_path: Path) -> None:
    found = examples()
    assert set(found) == {*BEFORE_A_RUN, *WITH_A_RUN, *RESIDENT, *AFTER, *SERVERS}, "place each new example"
    # `labctl hub serve` serves a folder of model folders: one of this test's own, so that it does not wait on the
    # real_engine tier making build/tiny-models beside it.
    tiny = user.root / "tiny-models" / "tiny-sample"
    tiny.mkdir(parents=True)
    (tiny / "config.json").write_text('{"model_type": "qwen3"}\n')
    user.env["LABCTL_TINY_MODELS"] = str(tiny.parent)
    made: dict[str, str] = {}

    def run(path: str) -> Result:
        typed = as_typed(found[path], made)
        result = shell(user, typed, user.lab if path != "labctl init" else user.root)
        assert result.code == 0, f"{typed}\n{result.stdout}\n{result.stderr}"
        if path == "labctl init":
            simulate_fast(user.lab, "sglang", "qwen3-32b")
        return result

    for path in BEFORE_A_RUN:
        run(path)
    assert (user.lab / "answers.json").is_file()
    for path in WITH_A_RUN:
        result = run(path)
        text = result.stdout + result.stderr
        if path in ("labctl up", "labctl reproduce"):
            made["run"] = re.search(r"(?:ready: \S+|as) run (\d{8}-\d{6}-[0-9a-f]{6})", text).group(1)  # type: ignore[union-attr]
        elif path in ("labctl bench", "labctl bench run"):
            made["bench 2" if "bench 1" in made else "bench 1"] = re.search(r"bench (b\S+) \(", text).group(1)  # type: ignore[union-attr]
        elif path in ("labctl eval", "labctl eval run"):
            made["eval 2" if "eval 1" in made else "eval 1"] = re.search(r"eval (e\S+):", text).group(1)  # type: ignore[union-attr]
    down = shell(user, f"labctl down {made['run']}", user.lab)  # the reproduced run: GPUs 0 and 1 again
    assert down.code == 0, down
    resident = shell(user, "labctl up sglang --profile qwen3-32b --resident --json", user.lab)
    assert resident.code == 0, resident
    made["run"] = json.loads(resident.stdout)["run_id"]
    for path in RESIDENT:
        run(path)
    assert shell(user, f"labctl down {made['run']}", user.lab).code == 0
    for path in AFTER:
        run(path)
    for path in SERVERS:
        typed = as_typed(found[path], made)
        server = subprocess.Popen(
            ["bash", "-c", f"exec {typed}"], env=user.env, cwd=user.lab, stdout=subprocess.PIPE, text=True
        )
        try:
            assert server.stdout is not None
            first = server.stdout.readline()
            assert first.startswith("serving "), f"{typed}: {first!r}"
        finally:
            server.terminate()
            server.wait(30)
