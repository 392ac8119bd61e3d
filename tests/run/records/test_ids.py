"""Ids people can type: a unique prefix or suffix of a run, bench or evaluation id names it, `latest` is this
user's newest, and a part that names none or several is refused in one line that says what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.errors import BadInput
from labctl.run.records.ids import resolve, resolve_bench_or_run
from labctl.run.records.record import Endpoint, new_record
from labctl.run.records.store import Runs

A, B, C = "20261207-041200-a1b2c3", "20261207-041300-ffee01", "20261207-050000-a1b299"


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    store = Runs(tmp_path / "home")
    for run_id, owner in ((A, None), (B, None), (C, "someone-else")):
        store.save(new_record(run_id, "harness", "smoke", "m", Endpoint(), owner, "harness-check"))
    (store.dir(A) / "bench").mkdir()
    (store.dir(A) / "bench" / f"b{A}.json").write_text("{}")
    (store.dir(B) / "bench").mkdir()
    (store.dir(B) / "bench" / f"b{B}.json").write_text("{}")
    return store


def test_a_unique_prefix_or_suffix_names_the_run(runs: Runs) -> None:
    assert resolve(runs, "ffee01", "run") == B
    assert resolve(runs, "20261207-0413", "run") == B
    assert resolve(runs, "20261207-05", "run") == C
    assert resolve(runs, A, "run") == A  # a full id as given


def test_latest_is_this_users_newest_not_anyones(runs: Runs) -> None:
    assert resolve(runs, "latest", "run") == B  # C is newer but someone else's
    assert resolve(runs, "latest", "bench") == f"b{B}"


def test_a_part_naming_several_or_none_is_refused_in_one_line(runs: Runs) -> None:
    with pytest.raises(BadInput) as several:
        resolve(runs, "20261207-04", "run")
    assert f"'20261207-04' names 2 run ids ({A}, {B})" in str(several.value) and "\n" not in str(several.value)
    with pytest.raises(BadInput) as none:
        resolve(runs, "beef00", "run")
    assert "no run id" in str(none.value) and "labctl runs lists them" in str(none.value)


def test_too_short_or_not_an_id_is_left_to_the_command(runs: Runs) -> None:
    assert resolve(runs, "a1b", "run") == "a1b"
    assert resolve(runs, "../x", "run") == "../x"


def test_bench_ids_by_part_and_compare_takes_either(runs: Runs) -> None:
    assert resolve(runs, "b20261207-0412", "bench") == f"b{A}"
    assert resolve(runs, "ffee01", "bench") == f"b{B}"
    assert resolve_bench_or_run(runs, "ffee01") == B  # a run first: compare reads its newest complete result
    assert resolve_bench_or_run(runs, f"b{A}"[:15]) == f"b{A}"
