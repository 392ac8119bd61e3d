"""Which of a host's cells may run side by side (GPU sets), and where a prefetch may run (never beside a level
of its host), in process: the decisions, without a host."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.study.lanes import Need, clash, free_slot, need_of, startable
from labctl.study.prefetch import Prefetcher, Step, overlaps
from labctl.study.state import StudyState


def gpus(cell: str, *ids: str, count: int = 0) -> Need:
    return Need(cell, frozenset(ids), count or len(ids))


def test_cells_on_disjoint_gpus_start_together_and_a_shared_gpu_waits() -> None:
    a, b, c = gpus("A", "0"), gpus("B", "1"), gpus("C", "0", "1")
    assert startable([a, b, c], [], 2) == [0, 1]  # C shares both GPUs: it waits for A and B
    assert startable([c], [a], 2) == []
    assert startable([b, c], [a], 2) == [0]
    assert startable([c, a], [], 2) == [0]  # A may not overtake C on GPU 0


def test_repeats_of_one_cell_never_overlap_and_keep_the_studys_order() -> None:
    a1, b1, a2, b2 = gpus("A", "0"), gpus("B", "1"), gpus("A", "0"), gpus("B", "1")
    assert startable([a1, b1, a2, b2], [], 2) == [0, 1]
    assert startable([a2, b2], [b1], 2) == [0]  # A2 starts once A1 ended; B2 waits for B1
    same_count = [gpus("D", count=1), gpus("D", count=1)]
    assert startable(same_count, [], 8) == [0]  # two repeats of a count: cell, even with GPUs to spare


def test_count_cells_share_the_host_by_number_and_gpu_free_engines_run_alone() -> None:
    one, other, two = gpus("A", count=1), gpus("B", count=1), gpus("C", count=2)
    assert startable([one, other, two], [], 2) == [0, 1]
    assert startable([two], [one], 2) == []
    assert clash(one, other, 1) and not clash(one, other, 2)
    free = [Need("H", frozenset(), 0), Need("J", frozenset(), 0)]
    assert startable(free, [], 2) == [0]  # a GPU-free engine measures the CPUs every engine shares
    assert startable([one], [free[0]], 2) == []
    assert startable([gpus("E", "0")], [], 0) == [0]  # a host that named no GPUs: up itself says why


def test_need_of_reads_the_profile(lab: Path) -> None:
    harness = load_profile(Lab(lab), "harness", "smoke")
    assert need_of("h", harness) == Need("h", frozenset(), 0)
    vllm = load_profile(Lab(lab), "vllm", "qwen3-32b")
    assert need_of("v", vllm) == Need("v", frozenset({"0", "1"}), 2)
    spark = load_profile(Lab(lab), "vllm", "qwen3.6-35b-a3b-fp8")
    assert need_of("s", spark) == Need("s", frozenset(), 1)
    assert free_slot(set()) == 0 and free_slot({0, 2}) == 1


def make(tmp_path: Path, log: list[str], *steps: tuple[str, list[str]]) -> Prefetcher:
    def action(what: str) -> None:
        log.append(what)

    made = [Step(what, cells, lambda w=what: action(w)) for what, cells in steps]  # type: ignore[misc]
    return Prefetcher(StudyState(tmp_path / "studies" / "s"), "h1", made)


def test_a_cell_pulls_only_what_it_needs_before_its_up(tmp_path: Path) -> None:
    log: list[str] = []
    pre = make(tmp_path, log, ("pull a", ["A"]), ("pull b", ["B"]), ("fetch m", ["A", "B"]))
    pre.for_cells(["A"], "before the host measures")
    assert log == ["pull a", "fetch m"] and pre.pending() == ["pull b"]
    written = json.loads((tmp_path / "studies/s/prefetch/h1.json").read_text())
    assert [(e["what"], e["where"]) for e in written] == [
        ("pull a", "before the host measures"),
        ("fetch m", "before the host measures"),
    ]


def test_between_levels_one_step_runs_and_only_while_no_other_cell_measures(tmp_path: Path) -> None:
    log: list[str] = []
    pre = make(tmp_path, log, ("pull b", ["B"]), ("pull c", ["C"]))
    with pre.level():  # another cell of the host is mid-level: nothing is pulled beside it
        assert pre.between_levels("A", "chat canary") == 0.0
    assert log == []
    assert pre.between_levels("A", "chat canary") >= 0.0
    assert log == ["pull b"]  # one step per gap: the GPU's wait stays one step long
    pre.between_levels("A", "chat")
    assert log == ["pull b", "pull c"] and pre.pending() == []
    assert pre.between_levels("A", "chat") == 0.0
    where = [e["where"] for e in json.loads((tmp_path / "studies/s/prefetch/h1.json").read_text())]
    assert where == ["between levels of A, after chat canary", "between levels of A, after chat"]


def test_a_level_waits_for_a_pull_in_progress(tmp_path: Path) -> None:
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []

    def slow() -> None:
        entered.set()
        release.wait(10)
        order.append("pulled")

    pre = Prefetcher(StudyState(tmp_path / "s"), "h1", [Step("pull x", ["X"], slow)])
    puller = threading.Thread(target=pre.for_cells, args=(["X"], "before X"))
    puller.start()
    assert entered.wait(10)

    def measure() -> None:
        with pre.level():
            order.append("measured")

    bench = threading.Thread(target=measure)
    bench.start()
    bench.join(0.2)
    assert order == []  # the level has not started beside the pull
    release.set()
    puller.join(10)
    bench.join(10)
    assert order == ["pulled", "measured"]


def test_an_overlap_is_a_caveat_on_the_level_it_touched(tmp_path: Path) -> None:
    state = StudyState(tmp_path / "s")
    (state.folder / "prefetch").mkdir(parents=True)
    pulls = [{"host": "h2", "what": "pull x", "started_at": "T10", "finished_at": "T12", "seconds": 2.0}]
    (state.folder / "prefetch" / "h2.json").write_text(json.dumps(pulls))
    cell = {
        "cell": "A@h1",
        "repeat": 1,
        "host": "h1",
        "started_at": "T00",
        "finished_at": "T20",
        "benches": [
            {"workload": "chat", "canary": True, "started_at": "T01", "finished_at": "T05"},
            {"workload": "chat", "canary": False, "started_at": "T06", "finished_at": "T19"},
        ],
    }
    found = overlaps(state, [cell])
    assert len(found) == 1 and found[0].startswith("A@h1 r1 chat: measured while h2 ran `pull x`")
    same_host_gap = {**cell, "host": "h2", "benches": cell["benches"][:1]}  # pulled between its own levels
    assert overlaps(state, [same_host_gap]) == []
    older = {k: v for k, v in cell.items() if k != "benches"}  # a state without bench times: the whole cell
    assert overlaps(state, [older])[0].startswith("A@h1 r1: measured while h2")
    assert overlaps(state, [{**older, "host": "h2"}]) == []


def test_a_cells_own_pull_waits_until_no_level_of_its_host_is_in_progress(tmp_path: Path) -> None:
    log: list[str] = []
    pre = make(tmp_path, log, ("pull b", ["B"]))
    assert pre.for_cells(["A"], "before A r1") == 0.0  # nothing pending for A: no wait
    level = pre.level()
    level.__enter__()
    puller = threading.Thread(target=pre.for_cells, args=(["B"], "before B r1"))
    puller.start()
    puller.join(0.2)
    assert log == []  # A is mid-level on the host: B's pull waits
    level.__exit__(None, None, None)
    puller.join(10)
    assert log == ["pull b"]


def test_a_cell_trusts_only_a_bench_it_wrote_itself() -> None:
    from labctl.bench.results import parse_result
    from labctl.study.cell_run import written_by

    tag = {"study": "s", "cell": "harness.smoke@local", "repeat": 1}
    base = {"bench_id": "b20261207-000000-aaaaaa", "run_id": "20261207-000000-aaaaaa", "levels": [], "target": {}}
    base["workload"] = {"name": "w", "sha256": "1" * 64}
    ours = parse_result({**base, "writer": {"process": "10:99", "host": "h"}})
    assert written_by(ours, tag, "10:99")
    assert written_by(parse_result({**base, "writer": {"process": "10:99"}, "study": tag}), tag, "10:99")
    assert not written_by(ours, tag, "11:5")  # a bench run by hand (another process) on the cell's engine
    other = parse_result({**base, "writer": {"process": "10:99"}, "study": {**tag, "cell": "x@local"}})
    assert not written_by(other, tag, "10:99")  # another cell's
    assert not written_by(parse_result(base), tag, "10:99")  # a result that names no writer
