"""Through the CLI: `show`, `export` and `bench list` take a run by a part of its id or as `latest`; a part that
names several runs is one `Error:` line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.support import run_labctl

from labctl.run.records.record import Endpoint, new_record
from labctl.run.records.store import Runs

pytestmark = pytest.mark.process

OLD, NEW = "20261207-041200-a1b2c3", "20261207-041300-ffee01"


def test_a_run_by_a_part_of_its_id_or_latest(tmp_path: Path) -> None:
    runs = Runs(tmp_path / "home")
    for run_id in (OLD, NEW):
        runs.save(new_record(run_id, "harness", "smoke", "m", Endpoint(), None, "harness-check", status="stopped"))
    env = {"LABCTL_HOME": str(runs.root.parent)}
    for given, meant in (("a1b2c3", OLD), ("20261207-0413", NEW), ("latest", NEW)):
        shown = run_labctl("show", given, "--json", env=env)
        assert shown.code == 0 and meant in shown.stdout, (given, shown)
    listed = run_labctl("bench", "list", "latest", env=env)
    assert listed.code == 0, listed
    several = run_labctl("show", "20261207-04", env=env)
    assert several.code == 2 and several.stderr.count("\n") == 1 and "names 2 run ids" in several.stderr, several


def test_runs_filters_by_owner_engine_status_and_date_and_shows_the_date(tmp_path: Path) -> None:
    runs = Runs(tmp_path / "home")
    made = [
        ("20261201-100000-aaaaa1", "harness", None, "stopped", "2026-12-01T10:00:00Z"),
        ("20261206-100000-aaaaa2", "vllm", None, "failed", "2026-12-06T10:00:00Z"),
        ("20261207-010000-aaaaa3", "harness", "colleague", "stopped", "2026-12-07T01:00:00Z"),
    ]
    for run_id, engine, owner, status, created in made:
        record = new_record(
            run_id, engine, "p", "m", Endpoint(), owner, "harness-check", status=status, created_at=created
        )
        runs.save(record)
    env = {"LABCTL_HOME": str(runs.root.parent)}

    def listed(*flags: str) -> list[str]:
        done = run_labctl("runs", "--json", *flags, env=env)
        assert done.code == 0, done
        return [row["run"] for row in json.loads(done.stdout)]

    assert listed("--mine") == [made[0][0], made[1][0]]
    assert listed("--engine", "harness") == [made[0][0], made[2][0]]
    assert listed("--status", "failed") == [made[1][0]]
    assert listed("--since", "2026-12-06") == [made[1][0], made[2][0]]
    assert listed("--mine", "--engine", "harness", "--since", "2026-12-01T09:00") == [made[0][0]]
    table = run_labctl("runs", env=env).stdout
    assert "CREATED (UTC)" in table and "2026-12-06 10:00:00" in table, table
    bad = run_labctl("runs", "--since", "yesterday", env=env)
    assert bad.code == 2 and "--since 'yesterday'" in bad.stderr and bad.stderr.count("\n") == 1, bad


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("labctl show 2026", {OLD, NEW}),
        ("labctl show la", {"latest"}),
        ("labctl up sgl", {"sglang"}),
        ("labctl up sglang --profile qwen3", {"qwen3-32b", "qwen3-32b-engine", "qwen3.6-35b-a3b-fp8"}),
        ("labctl bench 2026 --workload chat-", {"chat-sweep"}),
        ("labctl status --host lo", {"local"}),
    ],
)
def test_shell_completion_offers_ids_engines_profiles_workloads_and_hosts(
    tmp_path: Path, words: str, expected: set[str]
) -> None:
    runs = Runs(tmp_path / "home")
    for run_id in (OLD, NEW):
        runs.save(new_record(run_id, "harness", "smoke", "m", Endpoint(), None, "harness-check", status="stopped"))
    env = {
        "LABCTL_HOME": str(runs.root.parent),
        "_LABCTL_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - 1),
    }
    done = run_labctl(env=env)
    assert done.code == 0 and set(done.stdout.split()) == expected, done
