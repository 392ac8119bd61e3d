"""Effective settings per engine, in process: what the engine reports wins, then the rendered command (and the
options file labctl writes), then the defaults its folder states with where each was read. The engines' reports
are the personas' (each one's format as its engine's code states it), the commands the shipped profiles'."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.support import REPO

from labctl.catalog.engine_settings import BATCH_CAP, SETTINGS, from_report, info_labels
from labctl.catalog.engines import list_engine_names, load_engine
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile, list_profile_names, load_profile
from labctl.compose.declared_settings import effective_settings
from labctl.errors import BadInput
from labctl.harness.persona_http import metrics_text, persona_reply
from labctl.harness.personas import build_persona

LAB = Lab(REPO)
GPUS = {"NVIDIA_VISIBLE_DEVICES": "0,1"}
COUNTERS = {"requests_success_total": 0, "prompt_tokens_total": 0, "generation_tokens_total": 0}


def extra(profile: Profile, *words: str) -> Profile:
    """The profile with extra argv words, as a profile's extra_args (or a study's override) gives them."""
    spec = {**profile.spec, "extra_args": [*profile.extra_args, *words]}
    return Profile(engine=profile.engine, name=profile.name, spec=spec, source=profile.source)


def values(found: dict) -> dict[str, tuple[str, str]]:
    return {name: (e.value, e.source) for name, e in found.items()}


@pytest.mark.parametrize("engine", list_engine_names(LAB))
def test_every_engine_states_each_setting_and_where_its_default_was_read(engine: str) -> None:
    rules = load_engine(LAB, engine).setting_rules
    assert rules is not None and rules.read_from
    assert {rule.name for rule in rules.rules} == set(SETTINGS)
    assert all(rule.default_from.strip() for rule in rules.rules)
    for profile in list_profile_names(LAB, engine):  # every shipped profile resolves every setting
        found = effective_settings(load_profile(LAB, engine, profile))
        assert found is not None and set(found) == {*SETTINGS, BATCH_CAP}  # the cap from the batch_cap block
        assert all(e.source in ("command", "default", "unknown") for e in found.values())  # nothing ran


def test_vllm_reads_its_cache_config_info_labels_over_the_command() -> None:
    profile = load_profile(LAB, "vllm", "qwen3-32b")
    declared = effective_settings(profile)
    assert declared is not None
    assert values(declared)["kv_cache_dtype"] == ("auto", "default")
    assert values(declared)["prefix_caching"] == ("on", "default")
    assert values(declared)["max_batch"] == ("64", "command")  # the profile's max_num_seqs, rendered
    assert "vllm/config/cache.py" in declared["kv_cache_dtype"].where
    # the persona states its CacheConfig as vLLM's loggers do: every field a label of vllm:cache_config_info
    persona, _ = build_persona(
        "vllm", "0.34.0", ["serve", "M", "--kv-cache-dtype", "fp8", "--disable-prefix-caching"], GPUS
    )
    text = metrics_text(persona, COUNTERS, 0, 0, 8)
    assert info_labels(text, "vllm:cache_config_info") == {
        "engine": "0",
        "model_name": "M",
        "cache_dtype": "fp8",
        "enable_prefix_caching": "False",
    }
    ran = effective_settings(profile, text)
    assert ran is not None
    assert values(ran)["kv_cache_dtype"] == ("fp8", "engine")
    assert values(ran)["prefix_caching"] == ("off", "engine")
    assert ran["prefix_caching"].where == "GET /metrics vllm:cache_config_info{enable_prefix_caching}"
    assert values(ran)["max_batch"] == ("64", "command")  # not in cache_config_info: the command says it


def test_vllm_command_turns_prefix_caching_off_and_the_last_word_wins() -> None:
    profile = load_profile(LAB, "vllm", "qwen3-32b")
    off = effective_settings(extra(profile, "--no-enable-prefix-caching", "--kv-cache-dtype=fp8_e4m3"))
    assert off is not None
    assert values(off)["prefix_caching"] == ("off", "command")
    assert (off["kv_cache_dtype"].value, off["kv_cache_dtype"].raw) == ("fp8", "fp8_e4m3")  # one word for one format
    both = effective_settings(extra(profile, "--disable-prefix-caching", "--enable-prefix-caching"))
    assert both is not None and values(both)["prefix_caching"] == ("on", "command")


def test_sglang_reads_its_server_info() -> None:
    profile = load_profile(LAB, "sglang", "qwen3-32b")
    argv = [
        "--model-path",
        "M",
        "--disable-radix-cache",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--max-running-requests",
        "64",
    ]
    persona, _ = build_persona("sglang", "0.5.23", argv, GPUS)
    answer = persona_reply(persona, "/server_info", True, 32768)
    assert answer is not None
    ran = effective_settings(profile, answer.body.decode())
    assert ran is not None
    assert values(ran) == {
        "kv_cache_dtype": ("fp8", "engine"),
        "prefix_caching": ("off", "engine"),  # disable_radix_cache: true, read negated
        "chunked_prefill": ("on", "engine"),  # a positive chunked_prefill_size
        "speculative_decoding": ("off", "engine"),  # speculative_algorithm: null
        "max_batch": ("64", "command"),  # the batch_cap block reads the command line
        "sampling_defaults": ("model", "engine"),
    }
    assert ran["prefix_caching"].raw == "True" and ran["prefix_caching"].where == "GET /server_info disable_radix_cache"
    assert values(effective_settings(profile, "not json") or {})["prefix_caching"] == ("on", "default")


def test_trtllm_reads_its_kv_cache_gauge_and_the_options_file() -> None:
    profile = load_profile(LAB, "trtllm", "qwen3-32b")
    declared = effective_settings(profile)
    assert declared is not None
    assert values(declared)["prefix_caching"] == ("on", "default")  # KvCacheConfig.enable_block_reuse
    assert values(declared)["chunked_prefill"] == ("off", "default")
    text = 'trtllm_kv_cache_config_info{model_name="m",engine_type="trtllm",cache_dtype="fp8",enable_block_reuse="False"} 1\n'
    ran = effective_settings(profile, text)
    assert ran is not None
    assert values(ran)["kv_cache_dtype"] == ("fp8", "engine") and values(ran)["prefix_caching"] == ("off", "engine")
    persona, _ = build_persona("trtllm", "1.2.1", ["M"], GPUS)
    assert 'cache_dtype="auto",enable_block_reuse="True"' in metrics_text(persona, COUNTERS, 0, 0, 8)


def test_trtllm_options_file_wins_over_its_command(tmp_path: Path) -> None:
    lab = tmp_path / "lab"
    (lab / "engines").mkdir(parents=True)
    import shutil

    shutil.copytree(REPO / "engines" / "trtllm", lab / "engines" / "trtllm")
    path = lab / "engines" / "trtllm" / "engine.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["options_file"]["content"]["kv_cache_config"] = {"dtype": "fp8", "enable_block_reuse": False}
    spec["options_file"]["content"]["enable_chunked_prefill"] = True
    path.write_text(yaml.safe_dump(spec))
    found = effective_settings(load_profile(Lab(lab), "trtllm", "qwen3-32b"))
    assert found is not None
    assert values(found)["kv_cache_dtype"] == ("fp8", "command")
    assert found["kv_cache_dtype"].where == "options file kv_cache_config.dtype"
    assert values(found)["prefix_caching"] == ("off", "command")
    assert values(found)["chunked_prefill"] == ("on", "command")


def test_atlas_states_nothing_so_its_command_and_its_own_defaults_decide() -> None:
    profile = load_profile(LAB, "atlas", "qwen3.6-35b-a3b-fp8")
    found = effective_settings(profile)
    assert found is not None
    assert values(found)["kv_cache_dtype"] == ("fp8", "default")
    assert values(found)["prefix_caching"] == ("off", "default")
    assert values(found)["max_batch"] == ("8", "default")  # sequences per decode step
    assert "serve_args.rs" in found["max_batch"].where
    assert found["sampling_defaults"].value == "engine: min_p 0.08, top_n_sigma 1.0"
    on = effective_settings(extra(profile, "--enable-prefix-caching", "--max-batch-size", "32"))
    assert on is not None  # the profile's --max-num-seqs 8 admits fewer than a decode batch of 32: it caps
    assert values(on)["prefix_caching"] == ("on", "command") and values(on)["max_batch"] == ("8", "command")
    raised = effective_settings(extra(profile, "--max-num-seqs", "64", "--max-batch-size", "32"))
    assert raised is not None and raised["max_batch"].where == "--max-batch-size"
    assert values(raised)["max_batch"] == ("32", "command")
    assert values(effective_settings(profile, "anything") or {})["prefix_caching"] == ("off", "default")


def test_the_harness_declares_its_settings() -> None:
    found = effective_settings(load_profile(LAB, "harness", "smoke"))
    assert found is not None
    assert values(found)["prefix_caching"] == ("off", "default")
    assert values(found)["max_batch"] == ("256", "command")


def test_an_engine_that_reports_nothing_usable_falls_back_to_the_command() -> None:
    rules = load_engine(LAB, "vllm").setting_rules
    assert rules is not None
    assert from_report(rules, "vllm:num_requests_running 0\n") == {}
    assert from_report(rules, 'vllm:cache_config_info{enable_prefix_caching="maybe"} 1\n') == {}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"prefix_caching": {"default_from": "x", "bogus": 1}}, "settings.prefix_caching.bogus: unknown field"),
        ({"turbo": {"default_from": "x"}}, "settings.turbo: unknown field"),
        ({"chunked_prefill": {"default": 8}}, "missing required field 'default_from'"),
        ({"max_batch": {"default_from": "x"}}, "settings.max_batch: unknown field"),  # its home is batch_cap
        (
            {"prefix_caching": {"default_from": "x", "reported": {"key": "disable_radix_cache"}}},
            "settings.prefix_caching.reported: with format prometheus, give metric and label only.",
        ),
        (
            {"kv_cache_dtype": {"default_from": "x", "command": [{"option": "kv_cache_config.dtype"}]}},
            "an option form needs the engine's options_file",
        ),
        (
            {"report": {"route": "/admin", "format": "prometheus"}},
            "settings.report.route: the report route must be one of",
        ),
    ],
)
def test_a_bad_settings_block_is_one_line(tmp_path: Path, change: dict, expected: str) -> None:
    lab = tmp_path / "lab"
    (lab / "engines" / "vllm").mkdir(parents=True)
    spec = yaml.safe_load((REPO / "engines" / "vllm" / "engine.yaml").read_text())
    spec["settings"] = {**spec["settings"], **change}
    (lab / "engines" / "vllm" / "engine.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(BadInput) as info:
        load_engine(Lab(lab), "vllm")
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_a_record_keeps_its_settings_and_show_lists_them() -> None:
    from labctl.run.records.record import Record
    from labctl.run.records.store import describe

    found = effective_settings(load_profile(LAB, "atlas", "qwen3.6-35b-a3b-fp8"))
    record = Record(
        run_id="20261206-120000-aaaaaa", status="running", engine="atlas", profile="p", served_model_name="m"
    )
    with_settings = record.changed(settings=found)
    assert Record.from_json(with_settings.to_json()).settings == found
    assert "settings" not in record.to_json()  # unknown: an older record's shape, unchanged
    rows = dict(describe(with_settings))
    assert rows["setting prefix_caching"].startswith("off (False) [default: serve_args.rs")
    bad = {**with_settings.to_json(), "settings": {"prefix_caching": {"value": 1, "source": "engine"}}}
    with pytest.raises(ValueError):
        Record.from_json(bad)
