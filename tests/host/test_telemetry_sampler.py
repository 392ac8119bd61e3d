"""The telemetry sampler against real things on loopback: an engine endpoint that answers 404, one with
no known metric names, one that trickles forever; an nvidia-smi that fails, one that is absent, and the
simulated lab's stand-in (its GPUs labelled simulated). A sampler that gets nothing says why; it never
raises into the benchmark."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers.support import REPO

from labctl.catalog.engine_metrics import parse_prometheus
from labctl.catalog.engines import lab_telemetry
from labctl.catalog.lab import Lab
from labctl.host.engine.sampler import Plan, Sampler

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers

STAND_IN = REPO / "scripts" / "sim" / "nvidia-smi"
TELEMETRY = lab_telemetry(Lab(REPO))  # the shipped engines' metric names and routes


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/unknown/metrics":
            body = b"# TYPE some_other_server_total counter\nsome_other_server_total 3\n"
        elif self.path == "/vllm/metrics":
            body = b'vllm:num_requests_running{model_name="m"} 2\nvllm:generation_tokens_total{model_name="m"} 9\n'
        elif self.path == "/trickle/metrics":
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(200):
                    self.wfile.write(b"# x\n")
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                pass
            return
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def sample(plan: Plan, path: Path, seconds: float = 0.4) -> Sampler:
    sampler = Sampler(plan, path, interval=0.1).start()
    time.sleep(seconds)
    sampler.stop()
    return sampler


def test_endpoints_that_give_nothing_are_named_with_why(server: str, tmp_path: Path) -> None:
    missing = sample(
        Plan(None, [], f"{server}/nothing/metrics", "vllm", telemetry=TELEMETRY), tmp_path / "a.jsonl"
    ).description()
    assert "HTTP 404" in missing["missing"]["engine"]
    unknown = sample(
        Plan(None, [], f"{server}/unknown/metrics", None, telemetry=TELEMETRY), tmp_path / "b.jsonl"
    ).description()
    assert "no metric name of a known engine" in unknown["missing"]["engine"]
    assert "/unknown/prometheus/metrics: ValueError: HTTP 404" in unknown["missing"]["engine"]  # tried next
    started = time.perf_counter()
    trickle = sample(
        Plan(None, [], f"{server}/trickle/metrics", "vllm", telemetry=TELEMETRY), tmp_path / "c.jsonl", 0.2
    )
    assert time.perf_counter() - started < 15
    assert "still answering after" in trickle.description()["missing"]["engine"]


def test_a_known_engine_is_mapped_and_its_series_written(server: str, tmp_path: Path) -> None:
    sampler = sample(Plan(None, [], f"{server}/vllm/metrics", "external", telemetry=TELEMETRY), tmp_path / "t.jsonl")
    doc = sampler.description()
    assert doc["engine"]["names_of"] == "vllm" and doc["engine"]["samples"] >= 3
    assert doc["engine"]["mapping"]["running"] == "vllm:num_requests_running"
    assert "vllm" in doc["missing"]["engine.waiting"]
    lines = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert lines and all(line["values"] == {"running": 2.0, "generation_tokens": 9.0} for line in lines)
    assert sampler.kinds() == {"running": "gauge", "generation_tokens": "counter"}


def test_nvidia_smi_failing_absent_and_simulated(tmp_path: Path) -> None:
    failing = sample(Plan(["false"], [], None, None, telemetry=TELEMETRY), tmp_path / "f.jsonl").description()
    assert "nvidia-smi exit 1" in failing["missing"]["gpu"]
    absent = sample(
        Plan([str(tmp_path / "no-such-nvidia-smi")], [], None, None, telemetry=TELEMETRY), tmp_path / "g.jsonl"
    )
    assert "FileNotFoundError" in absent.description()["missing"]["gpu"]
    config = tmp_path / "sim.json"
    gpus = [{"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "utilization_gpu": 40}] * 2
    config.write_text(json.dumps({"host": "t", "gpus": gpus}))
    sampler = sample(
        Plan([str(STAND_IN), "--sim-config", str(config)], ["1"], None, None, telemetry=TELEMETRY),
        tmp_path / "s.jsonl",
        0.6,
    )
    doc = sampler.description()
    assert doc["gpu"]["simulated"] and doc["gpu"]["samples"] >= 2 and "gpu" not in doc["missing"]
    rows = [row for s in sampler.gpu.samples for row in s["gpus"]]
    assert {row["index"] for row in rows} == {"1"} and all(row["utilization_gpu_pct"] == 40.0 for row in rows)


def test_a_ratio_of_two_counters_keeps_its_kind(tmp_path: Path) -> None:
    """vLLM's prefix-cache hit rate is hits over queries: both counters are sampled, and the level summary
    divides their increases (a real vLLM on CPU showed the rate missing from every level)."""
    sampler = Sampler(Plan(None, [], None, None, telemetry=TELEMETRY), tmp_path / "r.jsonl")
    sampler.engine_name = "vllm"
    sampler.raw_names = parse_prometheus("vllm:prefix_cache_hits_total 5.0\nvllm:prefix_cache_queries_total 20.0\n")
    assert sampler.kinds() == {"prefix_cache_hit_rate": "ratio"}
