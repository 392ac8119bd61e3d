"""bench and eval against a loopback server that streams as a real vLLM 0.32 does (measured on the CPU
build: a role chunk, one chunk per token, a special token whose text is "", usage last; /version open; --api-key
guarding /v1/*): what the real server found, each fixed at its root."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.hostile_server import GAP_S, VLLM_VERSION, hostile_server
from helpers.support import run_labctl, tiny_tokenizer_cache

pytestmark = pytest.mark.process  # the CLI and loopback servers

SMALL = ("--workload", "latency-probe", "--requests", "3", "--output-len", "6", "--input-len", "8")


def bench(lab: Path, home: Path, base: str, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return run_labctl(
        "bench",
        "run",
        "--base-url",
        base,
        "--model",
        "m",
        *args,
        lab=lab,
        env={"LABCTL_HOME": str(home), **(env or {})},
    )


def requests_of(home: Path) -> list[dict[str, object]]:
    [path] = list(home.glob("runs/*/bench/*.requests.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]  # the first line names the format


def test_a_special_token_without_text_is_timed_and_ends_the_e2e(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with hostile_server("vllm-special") as base:
        result = bench(lab, home, base, *SMALL, "--json")
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    level = doc["levels"][0]
    assert level["completed"] == 3 and level["chunks_unlike_usage"] == 0 and level["total_output_tokens"] == 18
    for line in requests_of(home):
        # 6 tokens, 6 timed chunks: the last one (text "") ends the request, one gap after the last text
        assert len(line["itl_ms"]) == 5 and line["chunks_unlike_usage"] is False, line  # type: ignore[arg-type]
    assert level["median_tpot_ms"] >= GAP_S * 1000 * 0.9
    # the endpoint said what it runs, and nothing says what it runs on: unknown, never guessed
    assert doc["target"]["engine_version"] == {"version": VLLM_VERSION, "from": "/version"}
    assert doc["target"]["accelerator"] == "unknown"
    record = json.loads(next(home.glob("runs/*/record.json")).read_text())
    assert record["accelerator"] == "unknown" and record["engine_version"]["version"] == VLLM_VERSION


@pytest.mark.parametrize(
    "args",
    [
        ("--workload", "latency-probe", "--slo", "ttft_ms=5000,tpot_ms=5000"),
        ("--workload", "chat-sweep", "--concurrency", "1"),  # a workload that carries its own SLO
    ],
    ids=["--slo", "workload-slo"],
)
def test_a_request_made_only_of_tokens_without_text_is_measured_and_meets_the_slo(
    lab: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    home = tmp_path / "home"
    with hostile_server("vllm-empty") as base:
        result = bench(lab, home, base, *args, "--requests", "3", "--output-len", "4", "--input-len", "8", "--json")
    assert result.code == 0 and "Traceback" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    level = doc["levels"][0]
    assert doc["status"] == "complete" and level["completed"] == 3 and level["good_requests"] == 3
    assert level["median_ttft_ms"] is not None and level["median_e2el_ms"] is not None
    assert all(line["ttft_ms"] is not None for line in requests_of(home))


def test_a_wrong_key_is_told_apart_from_a_missing_one(lab: Path, tmp_path: Path) -> None:
    with hostile_server("vllm-special", api_key="right") as base:
        missing = bench(lab, tmp_path / "h", base, *SMALL)
        wrong = bench(lab, tmp_path / "h", base, *SMALL, "--api-key-env", "KEY", env={"KEY": "wrong"})
        evaluated = run_labctl(
            "eval", "run", "--base-url", base, "--model", "m", "--suite", "short-answer", "--api-key-env", "KEY",
            lab=lab, env={"LABCTL_HOME": str(tmp_path / "h"), "KEY": "wrong"},
        )  # fmt: skip
        right = bench(lab, tmp_path / "h", base, *SMALL, "--api-key-env", "KEY", env={"KEY": "right"})
    assert missing.code == 2 and "answered 401: it wants an API key" in missing.stderr, missing.stderr
    for refused in (wrong, evaluated):
        assert refused.code == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert "answered 401 to the API key labctl sent (from $KEY): the key is wrong" in refused.stderr
        assert "it wants an API key" not in refused.stderr
    assert right.code == 0, right.stderr


def test_tokenizer_takes_a_local_model_folder(lab: Path, tmp_path: Path) -> None:
    cache = tiny_tokenizer_cache(tmp_path / "hf")
    folder = tmp_path / "tiny-model"
    folder.mkdir()
    shutil.copy(next(cache.glob("models--acme--tiny/snapshots/*/tokenizer.json")), folder / "tokenizer.json")
    empty = tmp_path / "empty-model"
    empty.mkdir()
    with hostile_server("vllm-special") as base:
        local = bench(lab, tmp_path / "h", base, *SMALL, "--tokenizer", str(folder), "--json")
        no_file = bench(lab, tmp_path / "h2", base, *SMALL, "--tokenizer", str(empty))
        no_folder = bench(lab, tmp_path / "h3", base, *SMALL, "--tokenizer", str(tmp_path / "nowhere"))
    assert local.code == 0, local.stderr
    workload = json.loads(local.stdout)["workload"]
    assert workload["length_unit"] == "tokens" and workload["tokenizer"] == str((folder / "tokenizer.json").resolve())
    assert no_file.code == 2 and "holds no tokenizer.json" in no_file.stderr and no_file.stderr.count("\n") == 1
    assert no_folder.code == 2 and "no such folder" in no_folder.stderr
    for home in ("h2", "h3"):
        assert not (tmp_path / home / "runs").exists() or not list((tmp_path / home).glob("runs/*/bench/*"))


def test_up_s_api_check_tells_a_refused_key_from_a_missing_one() -> None:
    from labctl.errors import LabctlError
    from labctl.host.engine.probes import check_openai_api

    with hostile_server("vllm-special", api_key="right") as base:
        root = base.removesuffix("/v1")
        with pytest.raises(LabctlError, match="401 to the API key labctl gave the engine"):
            check_openai_api(root, "m", "wrong", None, timeout=10)
        with pytest.raises(LabctlError, match="401 though labctl gave the engine no key"):
            check_openai_api(root, "m", None, None, timeout=10)
