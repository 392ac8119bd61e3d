"""Validation before any write: for every command that writes into the home (or the lab, a hosts file, an
output path) or starts something, a refusal of its input is one `Error:` line, exit 2, and leaves every
byte, mode and time stamp of the home, the lab and the user's settings as it was. Each case runs through
the real CLI; the ones that need Docker also check that no container, volume or network appeared."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.harness_proc import harness
from helpers.lifecycle_helpers import remove_runs
from helpers.records import copy_lab, harness_run_record, stopped_smoke_run
from helpers.support import docker_available, run_labctl

from labctl.run.records.export import dump_export, export_from_run
from labctl.run.records.record import ResidentInfo
from labctl.run.records.store import Runs

ESC = "\x1b[2J"  # clears a terminal: a name that holds it rewrites what people see


@dataclass
class Scene:
    root: Path
    lab: Path
    home: Path
    config: Path
    env: dict[str, str]
    words: dict[str, str]  # what {name} stands for in a case's arguments


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    """One harness engine answering on loopback, so refusals that could only come after it answered can."""
    with harness("--ttft-ms", "1", "--tpot-ms", "0", model="m") as (base, _):
        yield base


@pytest.fixture
def scene(tmp_path: Path, engine: str) -> Iterator[Scene]:
    lab = copy_lab(tmp_path)
    (lab / "compose").mkdir()
    (lab / "workloads" / "empty.jsonl").write_text('{"prompt": ""}\n{"prompt": "   "}\n')
    (lab / "workloads" / "no-prompt.yaml").write_text(
        "description: a dataset whose every prompt is empty\ndataset: {kind: jsonl, path: empty.jsonl}\n"
        "requests: 2\nconcurrency: [1]\n"
    )
    home, config = tmp_path / "home", tmp_path / "config"
    config.mkdir()
    (config / "hosts.yaml").write_text("hosts: {}\n")
    stopped = stopped_smoke_run(lab, home, tmp_path / "cache")
    export = tmp_path / "alice-run.yaml"
    env = {"LABCTL_HOME": str(home), "XDG_CONFIG_HOME": str(config), "LABCTL_HOSTS": str(config / "hosts.yaml")}
    export.write_text(dump_export(export_from_run(Runs(home), stopped).doc))  # what `labctl export` writes
    keys = tmp_path / "keys.txt"
    keys.write_text("sk-a-key-long-enough-to-pass\n")
    keys.chmod(0o600)
    resident = ResidentInfo(bind="127.0.0.1", auth="file", keys=1, key_fingerprints=("0123456789ab",))
    words = {
        "live": harness_run_record(lab, home, engine, served="m"),
        "resident": harness_run_record(lab, home, engine, served="m", resident=resident),
        "stopped": stopped,
        "export": str(export),
        "keys": str(keys),
        "base": f"{engine}/v1",
        "root": str(tmp_path),
        "not_empty": str(lab / "engines"),
    }
    made = set((home / "runs").iterdir())
    yield Scene(tmp_path, lab, home, config, env, words)
    if set((home / "runs").iterdir()) - made and docker_available():  # a refusal that failed may have started one
        remove_runs(home)


def snapshot(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every path under the root: size, mtime, mode and, for a file, its content's hash."""
    seen: dict[str, tuple[int, int, int, str]] = {}
    for folder, _dirs, files in os.walk(root):
        for path in [folder, *(os.path.join(folder, f) for f in files)]:
            info = os.lstat(path)
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest() if os.path.isfile(path) else ""
            seen[path] = (info.st_size, info.st_mtime_ns, info.st_mode, digest)
    return seen


def changes(before: dict[str, tuple[int, int, int, str]], after: dict[str, tuple[int, int, int, str]]) -> list[str]:
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


CASES: list[tuple[str, tuple[str, ...], str]] = [
    # up: every flag is checked before Docker is asked anything
    ("up", ("up", "harness", "--profile", "smoke", "--allow-unpinned", "--owner", ESC), "--owner"),
    ("up", ("up", "harness", "--profile", "smoke", "--allow-unpinned", "--owner", ""), "--owner"),
    ("up", ("up", "harness", "--profile", "smoke", "--allow-unpinned", "--resident", "--keys", "0"), "--keys 0"),
    ("up", ("up", "harness", "--profile", "smoke", "--allow-unpinned", "--keys", "0"), "add --resident"),
    ("up", ("up", "harness", "--profile", "smoke", "--allow-unpinned", "--cache-dir", ""), "--cache-dir ''"),
    (
        "up",
        ("up", "harness", "--profile", "smoke", "--allow-unpinned", "--resident", "--cache-dir", "models"),
        "absolute path",
    ),
    ("up", ("up", "harness", "--profile", "smoke", "--allow-unpinned", "--cache-dir", "/m\nx"), "control"),
    ("up", ("up", "harness", "--profile", "nope"), "unknown profile"),
    ("up", ("up", "harness", "--profile", "smoke"), "not pinned"),
    ("up", ("up", "harness", "--profile", "smoke", "--allow-unpinned", "--timeout", "nan"), "--timeout nan"),
    ("up", ("up", "harness", "--profile", "smoke", "--allow-unpinned", "--resident", "--bind", "x"), "--bind"),
    # reproduce: the export is believed and the new run's flags pass before Docker is asked
    ("reproduce", ("reproduce", "{export}", "--owner", ESC), "--owner"),
    ("reproduce", ("reproduce", "{export}", "--cache-dir", "models"), "absolute path"),
    ("reproduce", ("reproduce", "{stopped}", "--cache-dir", ""), "--cache-dir ''"),
    ("reproduce", ("reproduce", "{export}", "--timeout", "-1"), "--timeout -1"),
    ("reproduce", ("reproduce", "{root}/missing.yaml"), "missing.yaml"),
    ("reproduce", ("reproduce", "{export}", "--bind", "everywhere"), "--bind"),
    # down and rotate-key: a --force that says no reason, options that contradict each other
    ("down", ("down", "{live}", "--force"), "--reason"),
    ("down", ("down", "{live}", "--all"), "--all"),
    ("rotate-key", ("rotate-key", "{resident}", "--keys", "0"), "--keys 0"),
    ("rotate-key", ("rotate-key", "{resident}", "--keys", "2", "--key-file", "{keys}"), "not both"),
    ("rotate-key", ("rotate-key", "{resident}", "--force"), "--reason"),
    ("rotate-key", ("rotate-key", "{live}"), "not a resident deployment"),
    # bench run and eval run: names, numbers and datasets before a record or result exists
    ("bench", ("bench", "run", "--base-url", "{base}", "--model", "m", "--workload", "no-prompt"), "no usable prompt"),
    ("bench", ("bench", "run", "{live}", "--workload", "no-prompt"), "no usable prompt"),
    (
        "bench",
        (
            "bench",
            "run",
            "--base-url",
            "{base}",
            "--model",
            "m",
            "--workload",
            "latency-probe",
            "--environment-label",
            "",
        ),
        "--environment-label ''",
    ),
    (
        "bench",
        (
            "bench",
            "run",
            "--base-url",
            "{base}",
            "--model",
            "m",
            "--workload",
            "latency-probe",
            "--environment-label",
            ESC,
        ),
        "control characters",
    ),
    ("bench", ("bench", "run", "{live}", "--workload", "latency-probe", "--slo", "ttft_ms=-1"), "--slo"),
    ("bench", ("bench", "run", "{live}", "--workload", "latency-probe", "--repeat", "0"), "--repeat 0"),
    ("bench", ("bench", "run", "{live}", "--workload", "latency-probe", "--find-max-rate"), "needs an SLO"),
    ("bench", ("bench", "run", "{stopped}", "--workload", "latency-probe"), "not running"),
    ("bench", ("bench", "run", "{live}", "--workload", "latency-probe", "--tokenizer", f"acme/{ESC}"), "--tokenizer"),
    (
        "eval",
        ("eval", "run", "--base-url", "{base}", "--model", "m", "--suite", "short-answer", "--environment-label", ESC),
        "control characters",
    ),
    (
        "eval",
        ("eval", "run", "--base-url", "{base}", "--model", "m", "--suite", "short-answer", "--environment-label", ""),
        "--environment-label ''",
    ),
    ("eval", ("eval", "run", "--base-url", "{base}", "--model", "zz", "--suite", "short-answer"), "not served"),
    ("eval", ("eval", "run", "{live}", "--suite", "nope"), "nope"),
    ("eval", ("eval", "run", "{live}", "--suite", "short-answer", "--concurrency", "0"), "--concurrency 0"),
    # fetch, pin, render: the lab's files and the model cache
    ("fetch", ("fetch", "vllm", "--profile", "qwen3-32b", "--cache-dir", ""), "--cache-dir ''"),
    ("fetch", ("fetch", "vllm", "--profile", "qwen3-32b", "--cache-dir", "models"), "absolute path"),
    ("pin", ("pin", "harness", "--profile", "nope"), "unknown profile"),
    ("render", ("render", "harness", "--profile", "smoke", "--cache-dir", "models"), "absolute path"),
    # export and report: output paths
    ("export", ("export", "{stopped}", "-o", ""), "empty"),
    ("export", ("export", "{stopped}", "-o", "{root}/no/such/folder/x.yaml"), "does not exist"),
    ("report", ("report", "{live}", "-o", ""), "empty"),
    ("report", ("report", "b20260101-000000-abcdef", "-o", "{root}/report"), "b20260101-000000-abcdef"),
    # init, hosts, gc: the user's settings and the global options
    ("init", ("init", ""), "empty path"),
    ("init", ("init", "{not_empty}"), "not empty"),
    ("hosts add", ("hosts", "add", "h\x1bx", "local"), "host name"),
    ("hosts add", ("hosts", "add", "h1", "local", "--socket", "docker.sock"), "--socket"),
    ("hosts add", ("hosts", "add", "h1", "ssh://lab@10.0.0.5:99999"), "not a Docker endpoint"),
    ("hosts remove", ("hosts", "remove", "nope"), "nope"),
    ("gc", ("--host", "nope", "gc", "--yes"), "unknown host"),
    # studies: a missing or hostile file, a study that never ran
    ("study run", ("study", "run", "{root}/missing.yaml"), "no study file"),
    ("study run", ("study", "run", "{root}/missing.yaml", "--port", "0"), "no study file"),
    ("study report", ("study", "report", "never-ran", "-o", "{root}/report"), "no study 'never-ran'"),
    ("study report", ("study", "report", "../x"), "study name"),
]


def _args(scene: Scene, args: tuple[str, ...]) -> list[str]:
    return [arg.format(**scene.words) if "{" in arg else arg for arg in args]


def refuse_and_compare(scene: Scene, args: tuple[str, ...], words: str) -> None:
    before = snapshot(scene.root)  # the home, the lab, the settings, the export, where outputs would go
    result = run_labctl(*_args(scene, args), lab=scene.lab, env=scene.env, timeout=60)
    assert result.code == 2, result
    assert "Traceback" not in result.stderr and result.stderr.startswith("Error: "), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert words in result.stderr, result.stderr
    assert changes(before, snapshot(scene.root)) == []


@pytest.mark.process
@pytest.mark.parametrize("command, args, words", CASES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_a_refusal_changes_nothing(scene: Scene, command: str, args: tuple[str, ...], words: str) -> None:
    refuse_and_compare(scene, args, words)


def test_every_writing_command_has_a_refusal_here() -> None:
    writing = {"up", "reproduce", "down", "rotate-key", "bench", "eval", "fetch", "pin", "render", "export"}
    writing |= {"report", "init", "hosts add", "hosts remove", "gc", "study run", "study report"}
    assert writing <= {command for command, _, _ in CASES}


def _labelled(home: Path) -> dict[str, set[str]]:
    """This home's containers, and every volume and network labctl names (a refused run has no id to look for)."""
    found: dict[str, set[str]] = {}
    for kind, listing in (
        ("container", ["ps", "-a", "--filter", f"label=labctl.home={home}", "--format", "{{.Names}}"]),
        ("volume", ["volume", "ls", "--format", "{{.Name}} {{.Labels}}"]),
        ("network", ["network", "ls", "--format", "{{.Name}} {{.Labels}}"]),
    ):
        out = subprocess.run(["docker", *listing], capture_output=True, text=True, timeout=60, check=True).stdout
        found[kind] = {line.split(" ", 1)[0] for line in out.splitlines() if kind == "container" or "labctl" in line}
    return found


# Every up and reproduce case, and for bench and eval the refusals that come once the endpoint answered.
STARTING = [c for c in CASES if c[0] in ("up", "reproduce") or (c[0] in ("bench", "eval") and "{base}" in c[1])]


@pytest.mark.docker
@pytest.mark.parametrize("command, args, words", STARTING, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(STARTING)])
def test_a_refusal_starts_nothing(
    scene: Scene, docker_engine: None, command: str, args: tuple[str, ...], words: str
) -> None:
    before = _labelled(scene.home)
    refuse_and_compare(scene, args, words)
    after = _labelled(scene.home)
    assert {kind: sorted(after[kind] - before[kind]) for kind in after} == {k: [] for k in after}, json.dumps(
        {kind: sorted(names) for kind, names in after.items()}
    )
