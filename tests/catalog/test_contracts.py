"""Engine CLI contracts: the committed files load, and the checker says what the engines' own
parsers do (cross-checked against the real vLLM/SGLang code by `make contract-check`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labctl.catalog.contracts import (
    CommandContract,
    check_argv,
    contract_path,
    has_errors,
    load_contract,
)
from labctl.errors import BadInput

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ROOT / "engines"
FIXTURES = ROOT / "tests/fixtures/contracts"
M = "Qwen/Qwen3-32B"


def cmd(engine: str, version: str, command: str) -> CommandContract:
    return load_contract(contract_path(ENGINES, engine, version)).commands[command]


def errors(findings):  # type: ignore[no-untyped-def]
    return [f for f in findings if f.level == "error"]


def warnings(findings):  # type: ignore[no-untyped-def]
    return [f for f in findings if f.level == "warning"]


ALL = sorted(ENGINES.glob("*/cli/*.yaml")) + sorted(FIXTURES.glob("*.yaml"))


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_contract_loads(path: Path) -> None:
    c = load_contract(path)
    assert c.commands and all(cmd.options for cmd in c.commands.values())
    if c.provenance["kind"] == "pypi-wheel":
        assert c.provenance["version"] == c.version
    else:
        assert len(c.provenance["commit"]) == 40


def test_the_pinned_versions_are_there() -> None:
    for engine, version in [
        ("vllm", "0.34.0"),
        ("sglang", "0.5.23"),
        ("sglang", "0.5.19"),
        ("trtllm", "1.2.1"),
        ("atlas", "00caf3af"),
    ]:
        assert contract_path(ENGINES, engine, version).is_file(), (engine, version)


def test_vllm_0_11_refuses_model_option() -> None:
    serve = load_contract(FIXTURES / "vllm-0.11.0.yaml").commands["serve"]
    found = check_argv(serve, ["--model", M, "--port", "8000"])
    assert has_errors(found)
    (e,) = errors(found)
    assert e.option == "--model" and e.word_index == 0
    assert e.message.startswith("vLLM 0.11.0 rejects --model:")
    assert "positional argument" in e.message
    assert not has_errors(check_argv(serve, [M, "--port", "8000"]))


def test_newest_vllm_only_warns_about_model_option() -> None:
    found = check_argv(cmd("vllm", "0.34.0", "serve"), ["--model", M])
    assert not has_errors(found)
    (w,) = warnings(found)
    assert w.option == "--model" and "will be removed" in w.message


def test_known_good_argv_is_clean() -> None:
    """The command lines `make contract-check` also runs through the engines' own parsers."""
    known = json.loads((ROOT / "scripts" / "contracts" / "known_good.json").read_text())
    assert check_argv(cmd("sglang", "0.5.23", "launch_server"), known["sglang"]) == []
    argv = known["vllm"]
    assert check_argv(cmd("vllm", "0.34.0", "serve"), argv) == []


def test_atlas_refuses_revision() -> None:
    serve = cmd("atlas", "00caf3af", "serve")
    found = check_argv(serve, ["Qwen/Qwen3.6-35B-A3B-FP8", "--revision", "abc"])
    assert has_errors(found)
    assert errors(found)[0].option == "--revision"
    assert "Atlas 00caf3af does not know the option --revision" in errors(found)[0].message
    ok = [
        "Qwen/Qwen3.6-35B-A3B-FP8",
        "--bind",
        "0.0.0.0",
        "--served-model-name",
        "q",
        "--no-tui",
        "--disable-thinking",
        "--default-chat-template-kwargs",
        '{"enable_thinking": false}',
        "--enable-prefix-caching",
        "--max-num-seqs",
        "64",
    ]
    assert check_argv(serve, ok) == []
    assert check_argv(serve, ["--model-from-path", "/models/q", "--host=0.0.0.0"]) == []


def test_atlas_clap_rules() -> None:
    serve = cmd("atlas", "00caf3af", "serve")
    assert has_errors(check_argv(serve, ["--bind"]))  # missing value
    assert has_errors(check_argv(serve, ["--no-tui=true"]))  # a flag takes no value
    assert has_errors(check_argv(serve, ["--bin", "0.0.0.0"]))  # clap does not abbreviate
    assert has_errors(check_argv(serve, ["--auth-token", "t", "--auth-tokens-file", "f"]))  # conflicts_with
    assert has_errors(check_argv(serve, ["--disable-tool-grammar", "yes"]))  # bool: true|false
    assert not has_errors(check_argv(serve, ["--disable-tool-grammar", "false"]))


def test_unknown_sglang_flag_refused() -> None:
    found = check_argv(cmd("sglang", "0.5.23", "launch_server"), ["--model-path", M, "--max-model-len", "32768"])
    assert errors(found)[0].option == "--max-model-len"
    assert "SGLang 0.5.23 does not know the option --max-model-len" in errors(found)[0].message


def test_sglang_tp_is_an_abbreviation_with_a_warning() -> None:
    for version in ("0.5.23", "0.5.19"):
        found = check_argv(cmd("sglang", version, "launch_server"), ["--model-path", M, "--tp", "2"])
        assert not has_errors(found)
        (w,) = warnings(found)
        assert w.option == "--tp-size" and "abbreviation of --tp-size" in w.message


def test_ambiguous_abbreviation_refused() -> None:
    assert has_errors(check_argv(cmd("sglang", "0.5.23", "launch_server"), ["--model-path", M, "--enable"]))


def test_unknown_trtllm_option_refused() -> None:
    serve = cmd("trtllm", "1.2.1", "serve")
    found = check_argv(serve, [M, "--served_model_name", "x"])
    assert errors(found)[0].option == "--served_model_name"
    assert "No such option" in errors(found)[0].message
    good = [
        M,
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--tp_size",
        "2",
        "--revision",
        "main",
        "--reasoning_parser",
        "qwen3",
        "--backend",
        "pytorch",
        "--kv_cache_free_gpu_memory_fraction",
        "0.9",
    ]
    assert check_argv(serve, good) == []
    assert has_errors(check_argv(serve, [M, "--tp-size", "2"]))  # click: exact names only
    assert has_errors(check_argv(serve, ["--port", "8000"]))  # MODEL is required
    build = cmd("trtllm", "1.2.1", "build")
    assert (
        check_argv(
            build,
            [
                "--checkpoint_dir",
                "c",
                "--output_dir",
                "e",
                "--max_batch_size",
                "64",
                "--max_input_len",
                "4096",
                "--max_seq_len",
                "8192",
                "--max_num_tokens",
                "8192",
                "--gemm_plugin",
                "bfloat16",
            ],
        )
        == []
    )


def test_equals_form() -> None:
    serve = cmd("vllm", "0.34.0", "serve")
    assert check_argv(serve, [M, "--max-model-len=32768", "--port=8000"]) == []
    found = check_argv(serve, [M, "--port=notanint"])
    assert errors(found)[0].option == "--port" and "not a valid int" in errors(found)[0].message
    assert has_errors(check_argv(serve, [M, "--enable-prefix-caching=yes"]))


def test_bad_choice() -> None:
    found = check_argv(cmd("sglang", "0.5.23", "launch_server"), ["--model-path", M, "--kv-cache-dtype", "fp9"])
    (e,) = errors(found)
    assert e.option == "--kv-cache-dtype" and "invalid choice" in e.message and e.word_index == 2


def test_missing_value() -> None:
    found = check_argv(cmd("vllm", "0.34.0", "serve"), [M, "--port"])
    (e,) = errors(found)
    assert e.option == "--port" and "expected one argument" in e.message
    # the next word is an option, not a value
    assert has_errors(check_argv(cmd("vllm", "0.34.0", "serve"), [M, "--host", "--port", "8000"]))


def test_nargs_plus_and_extra_positional() -> None:
    serve = cmd("vllm", "0.34.0", "serve")
    assert check_argv(serve, [M, "--served-model-name", "a", "b"]) == []
    assert has_errors(check_argv(serve, [M, "--served-model-name"]))
    assert has_errors(check_argv(serve, [M, "other-model"]))


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("schema: 2\nengine: vllm\nversion: '1'\nprovenance: {}\ncommands: {}\n", "schema"),
        ("- just\n- a list\n", "expected a mapping"),
        ("schema: 1\nengine: nope\nversion: '1'\nprovenance: {kind: source}\ncommands: {}\n", "engine"),
        ("{{{ not yaml", "YAML syntax error"),
        ("a: &x [*x]\n", "anchor or alias"),
    ],
)
def test_malformed_contract_is_bad_input(tmp_path: Path, text: str, fragment: str) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(BadInput, match=fragment):
        load_contract(p)


def test_contract_with_unknown_key_or_dangling_reference_is_bad_input(tmp_path: Path) -> None:
    base = (ROOT / "engines/atlas/cli/00caf3af.yaml").read_text()
    p = tmp_path / "c.yaml"
    p.write_text(base.replace("parser: clap", "parser: clap\n    surprise: 1"))
    with pytest.raises(BadInput, match="unknown key"):
        load_contract(p)
    p.write_text(base.replace("- - --speculative", "- - --speculativ"))
    with pytest.raises(BadInput, match="not among the options"):
        load_contract(p)
    p.write_text(base.replace("takes_value: false", "takes_value: maybe", 1))
    with pytest.raises(BadInput, match="takes_value"):
        load_contract(p)


def test_oversized_or_missing_contract_is_bad_input(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("#" * (3 * 1024 * 1024))
    with pytest.raises(BadInput, match="bytes"):
        load_contract(big)
    with pytest.raises(BadInput, match="cannot read"):
        load_contract(tmp_path / "absent.yaml")


def test_contract_path_refuses_odd_names() -> None:
    assert contract_path(ENGINES, "vllm", "0.34.0") == ENGINES / "vllm/cli/0.34.0.yaml"
    with pytest.raises(BadInput):
        contract_path(ENGINES, "vllm", "../../etc/passwd")
    with pytest.raises(BadInput):
        contract_path(ENGINES, "../vllm", "1.0")
    assert contract_path(ENGINES, "ollama", "1.0") == ENGINES / "ollama/cli/1.0.yaml"  # a new engine may have one
