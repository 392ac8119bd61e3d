"""Each engine's batch cap, read from a command line and the defaults its folder states (with where they were
read), and the words that name a level above it; the shipped studies either raise the caps or say why not."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.support import REPO

from labctl.catalog.batch_cap import BatchCap, CapRule, CapSetting, flag_value
from labctl.catalog.engines import lab_batch_caps, load_engine
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile, with_overrides
from labctl.compose.render import serve_command
from labctl.errors import BadInput
from labctl.study.cells import expand_cells
from labctl.study.plan import cell_batch_cap
from labctl.study.spec import load_study

CAPS = lab_batch_caps(Lab(REPO))


def words(engine: str, profile: str) -> list[str]:
    return serve_command(with_overrides(load_profile(Lab(REPO), engine, profile), port=1), None).words


@pytest.mark.parametrize(
    ("engine", "profile", "value", "setting"),
    [
        ("vllm", "qwen3.6-35b-a3b-fp8", 8, "--max-num-seqs 8"),
        ("sglang", "qwen3.6-35b-a3b-fp8", 8, "--max-running-requests 8"),
        ("trtllm", "qwen3-32b", 64, "--max_batch_size 64"),
        ("trtllm", "qwen3-32b-engine", 64, "--max_batch_size 64"),  # a built engine: served at its build limit
        ("harness", "smoke", 256, "--max-num-seqs 256"),
        ("vllm-cpu", "tiny-qwen3", 32, "--max-num-seqs 32"),
    ],
)
def test_a_profile_that_sets_its_cap_reads_it_from_its_command_line(
    engine: str, profile: str, value: int, setting: str
) -> None:
    cap = CAPS[engine].read(words(engine, profile), "the profile's command line")
    assert (cap.value, cap.setting, cap.source) == (value, setting, "set on the profile's command line")


def test_atlas_is_capped_by_its_decode_batch_even_when_it_admits_more() -> None:
    cap = CAPS["atlas"].read(words("atlas", "qwen3.6-35b-a3b-fp8"), "the profile's command line")
    assert cap.value == 8 and cap.setting == "--max-batch-size 8 (sequences per decode step)"
    assert cap.source.startswith("its default: Atlas' crates/spark-server/src/cli/serve_args.rs @00caf3af")
    raised = CAPS["atlas"].read(["--max-num-seqs", "64", "--max-batch-size=32"], "x")
    assert (raised.value, raised.setting) == (32, "--max-batch-size 32 (sequences per decode step)")


def test_defaults_come_from_the_folder_and_an_engine_that_fixes_none_has_no_cap_known() -> None:
    assert (CAPS["trtllm"].read([], "x").value, CAPS["harness"].read([], "x").value) == (2048, 256)
    assert CAPS["vllm-cpu"].read([], "x").value == 128
    for engine, flag in (("vllm", "--max-num-seqs"), ("sglang", "--max-running-requests")):
        cap = CAPS[engine].read(["serve", "m"], "x")
        assert cap.value is None and cap.text.startswith(f"no cap known ({flag} not set: ")
        assert cap.above([1, 1000]) == [] and cap.queued(1000) is None
    bare = CapRule("mine").read(["--max-num-seqs", "4"], "x")
    assert bare.text == "no cap known (engines/mine/engine.yaml states no batch_cap)"


def test_the_last_value_wins_and_a_word_that_is_no_number_is_no_value() -> None:
    assert flag_value(["--n", "4", "--n=9"], "--n") == 9
    assert flag_value(["--n", "4", "--n"], "--n") == 4  # a dangling flag gives nothing
    assert flag_value(["--n", "many"], "--n") is None and flag_value(["--nn", "4"], "--n") is None


def test_a_level_above_the_cap_says_how_many_requests_queue() -> None:
    cap = BatchCap(8, "--max-num-seqs 8", "set on the run's command line")
    assert cap.queued(64) == (
        "c=64 ran against a cap of 8: 56 requests queue (--max-num-seqs 8, set on the run's command line)"
    )
    assert cap.queued(8) is None and cap.above([1, 8, 9, 64]) == [9, 64]
    rule = CapRule("e", (CapSetting("--a", 16, "here"), CapSetting("--b", None, "derived")))
    assert rule.read([], "x") == BatchCap(16, "--a 16", "its default: here", "--a")  # the known one caps


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"flag": "max-num-seqs"}, r"batch_cap\.settings\[0\]\.flag: "),
        ({"default": 0}, r"batch_cap\.settings\[0\]\.default: "),
        ({"default_from": None}, r"batch_cap\.settings\[0\]: missing required field 'default_from'"),
        ({"default_from": "x\ny"}, r"batch_cap\.settings\[0\]\.default_from: "),
    ],
)
def test_a_bad_cap_in_the_folder_is_refused_at_load(lab: Path, change: dict[str, object], message: str) -> None:
    path = lab / "engines" / "vllm" / "engine.yaml"
    spec = yaml.safe_load(path.read_text())
    for key, value in change.items():
        if value is None:
            spec["batch_cap"]["settings"][0].pop(key)
        else:
            spec["batch_cap"]["settings"][0][key] = value
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(BadInput, match=message):
        load_engine(Lab(lab), "vllm")


def test_every_shipped_engine_states_its_cap_with_where_it_was_read() -> None:
    for engine, rule in CAPS.items():
        assert rule.settings, engine
        assert all(s.default_from for s in rule.settings), engine


def test_the_spark_study_raises_vllm_and_sglang_and_says_why_atlas_keeps_its_cap() -> None:
    study = load_study(REPO / "studies" / "spark-four-engines.yaml")
    cells = expand_cells(Lab(REPO), study, ["local"])
    caps = {
        c.entry.engine: cell_batch_cap(serve_command(with_overrides(c.profile, port=1), None).words, c) for c in cells
    }
    assert {engine: cap.value for engine, cap in caps.items()} == {"atlas": 8, "vllm": 64, "sglang": 64}
    chat = next(w.concurrency for w in study.workloads if w.name == "sharegpt")
    assert chat is not None and caps["vllm"].above(chat) == [] and caps["atlas"].above(chat) == [16, 32, 64]
    assert study.batch_caps_note is not None and "Atlas" in study.batch_caps_note


def test_the_h100_study_raises_every_cap_to_its_top_level() -> None:
    study = load_study(REPO / "studies" / "h100-qwen3-32b.yaml")
    for cell in expand_cells(Lab(REPO), study, ["local"]):
        cap = cell_batch_cap(serve_command(with_overrides(cell.profile, port=1), None).words, cell)
        assert cap.value == 1200 and cap.above([60, 600, 1200]) == [], cell.key


def test_a_run_reads_its_cap_from_its_containers_command_line_or_says_why_it_cannot() -> None:
    from labctl.bench.bench_request import run_batch_cap
    from labctl.run.records.record import ContainerInfo, Record

    def run(engine: str, argv: tuple[str, ...] | None) -> BatchCap:
        container = None if argv is None else ContainerInfo(command_line=argv)
        record = Record(
            run_id="r", status="running", engine=engine, profile="p", served_model_name="m", container=container
        )
        return run_batch_cap(record, CAPS)

    assert run("sglang", ("python3", "-m", "sglang.launch_server", "--max-running-requests", "16")).value == 16
    assert run("sglang", None).text == "no cap known (the run's command line was not recorded)"
    assert (
        run("external", ()).text
        == "no cap known (engine 'external' is not one of this lab's: its settings are unknown)"
    )
