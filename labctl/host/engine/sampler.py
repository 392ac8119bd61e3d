"""Sampling telemetry beside a running benchmark: the host's nvidia-smi and the engine's Prometheus
endpoint, each polled once a second on its own thread, every sample appended to one JSONL file.

Threads, not the event loop: a scrape or an nvidia-smi child blocks in I/O with the GIL released, so
the client's timestamps stay the client's. A sampler that fails keeps the bench going and says why."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from labctl.catalog.engine_metrics import (
    DEFAULT_METRICS_PATH,
    GPU_QUERY,
    MAX_SCRAPE_BYTES,
    MetricNames,
    Scrape,
    Telemetry,
    engine_of,
    kind_of,
    map_metrics,
    mapping_used,
    parse_gpu_lines,
    parse_prometheus,
)

INTERVAL_S = 1.0
SCRAPE_SECONDS = 5.0
perf = time.perf_counter


@dataclass
class Plan:
    """What to sample: the nvidia-smi command of the run's host (None: missing, with why) and the
    engine's metrics URL (None: missing, with why)."""

    gpu_command: list[str] | None
    gpu_ids: list[str]
    metrics_url: str | None
    engine_hint: str | None
    missing: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    telemetry: Telemetry = field(default_factory=Telemetry)  # the lab's engines' names and routes


@dataclass
class _Stream:
    samples: list[dict[str, Any]] = field(default_factory=list)
    failures: int = 0
    errors: list[str] = field(default_factory=list)  # the distinct reasons, first three


class Sampler:
    def __init__(self, plan: Plan, path: Path, interval: float = INTERVAL_S, api_key: str | None = None) -> None:
        """`api_key`: sent with each scrape, for an engine whose /metrics sits behind labctl's proxy."""
        self.plan, self.path, self.interval = plan, path, interval
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.gpu, self.engine = _Stream(), _Stream()
        self.engine_name: str | None = None
        self.raw_names: Scrape = {}
        self.threads: list[threading.Thread] = []
        self.file: Any = None

    def start(self) -> Sampler:
        if self.plan.gpu_command is not None or self.plan.metrics_url is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = self.path.open("a", encoding="utf-8")
        if self.plan.gpu_command is not None:
            self.threads.append(threading.Thread(target=self._loop, args=(self._sample_gpu,), daemon=True))
        if self.plan.metrics_url is not None:
            self.client = httpx.Client(timeout=2.0, headers=self.headers)
            self.threads.append(threading.Thread(target=self._loop, args=(self._sample_engine,), daemon=True))
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=10)
        if self.plan.metrics_url is not None:
            self.client.close()
        if self.file is not None:
            self.file.close()
            self.file = None

    def mark(self) -> None:
        """One engine sample now, besides the loop's: the bench takes one before and one after each level, so
        that a level shorter than the interval still has its counters' rise (its prefix-cache hits)."""
        if self.plan.metrics_url is not None and self.threads and not self.stop_event.is_set():
            self._sample_engine()

    def _loop(self, sample: Callable[[], None]) -> None:
        due = perf()
        while not self.stop_event.is_set():
            sample()
            due += self.interval
            self.stop_event.wait(max(0.0, due - perf()))
        sample()  # one last sample closes the last level's window

    def _write(self, record: dict[str, Any]) -> None:
        with self.lock:
            if self.file is not None:
                self.file.write(json.dumps(record) + "\n")
                self.file.flush()

    def _sample_gpu(self) -> None:
        assert self.plan.gpu_command is not None
        ids = ["-i", ",".join(self.plan.gpu_ids)] if self.plan.gpu_ids else []
        argv = [*self.plan.gpu_command, *ids, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"]
        t = perf()
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError) as exc:
            self._fail(self.gpu, f"{argv[0]}: {type(exc).__name__}: {exc}"[:200])
            return
        rows = parse_gpu_lines(proc.stdout) if proc.returncode == 0 else []
        if not rows:
            why = (proc.stdout + proc.stderr).strip().splitlines()
            self._fail(self.gpu, f"nvidia-smi exit {proc.returncode}: {why[0][:160] if why else 'no GPU lines'}")
            return
        sample = {"source": "gpu", "t": t, "wall": time.time(), "gpus": rows}
        self.gpu.samples.append(sample)
        self._write(sample)

    def _sample_engine(self) -> None:
        assert self.plan.metrics_url is not None
        t = perf()
        try:
            body = bytearray()
            with self.client.stream("GET", self.plan.metrics_url) as response:
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_SCRAPE_BYTES:
                        raise ValueError(f"answer beyond {MAX_SCRAPE_BYTES // (1024 * 1024)} MiB")
                    if perf() - t > SCRAPE_SECONDS:  # a trickling endpoint must not hold the sampler
                        raise ValueError(f"still answering after {SCRAPE_SECONDS:g} s")
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}")
        except (httpx.HTTPError, ValueError) as exc:
            self._fail(self.engine, f"GET {self.plan.metrics_url}: {type(exc).__name__}: {exc}"[:200])
            return
        values = parse_prometheus(body.decode("utf-8", "replace"))
        if self.engine_name is None:
            self.engine_name = engine_of(values, self.plan.engine_hint, self.plan.telemetry.names)
            self.raw_names = values
        if self.engine_name is None:
            url = self.plan.metrics_url
            other = sorted(set(self.plan.telemetry.paths.values()) - {DEFAULT_METRICS_PATH})
            if url.endswith(DEFAULT_METRICS_PATH) and other and not url.endswith(other[0]):
                # an endpoint labctl did not start may be an engine serving its names elsewhere (trtllm-serve,
                # whose /metrics is JSON)
                self.plan.metrics_url = url.removesuffix(DEFAULT_METRICS_PATH) + other[0]
            self._fail(self.engine, f"GET {url}: no metric name of a known engine (vLLM, SGLang, TensorRT-LLM, Atlas)")
            return
        sample = {"source": "engine", "t": t, "wall": time.time(), "values": map_metrics(self._names(), values)}
        self.engine.samples.append(sample)
        self._write(sample)

    def _names(self) -> MetricNames:
        assert self.engine_name is not None
        return self.plan.telemetry.names[self.engine_name]

    @staticmethod
    def _fail(stream: _Stream, error: str) -> None:
        stream.failures += 1
        if error not in stream.errors and len(stream.errors) < 3:
            stream.errors.append(error)

    def kinds(self) -> dict[str, str]:
        if self.engine_name is None:
            return {}
        # a ratio maps to NAME.num and NAME.den; its kind is NAME's
        commons = {c.split(".")[0] for c in map_metrics(self._names(), self.raw_names)}
        found = {c: kind_of(self._names(), c, self.raw_names) for c in sorted(commons)}
        return {c: k for c, k in found.items() if k is not None}

    def description(self) -> dict[str, Any]:
        """What was sampled, from where, and what is missing and why (stored in the result)."""
        missing = dict(self.plan.missing)
        if self.plan.gpu_command is not None and not self.gpu.samples:
            missing["gpu"] = f"no GPU sample: {'; '.join(self.gpu.errors) or 'none taken'}"
        if self.plan.metrics_url is not None and not self.engine.samples:
            missing["engine"] = f"no engine metrics: {'; '.join(self.engine.errors) or 'none taken'}"
        mapping = mapping_used(self._names(), self.raw_names) if self.engine_name else {}
        for common, source in mapping.items():
            if source is None:
                missing[f"engine.{common}"] = f"{self.engine_name} exports no such metric"
        simulated = any(row["simulated"] for s in self.gpu.samples for row in s["gpus"])
        return {
            "interval_s": self.interval,
            "gpu": {
                "command": self.plan.gpu_command,
                "gpu_ids": self.plan.gpu_ids,
                "samples": len(self.gpu.samples),
                "failures": self.gpu.failures,
                "simulated": simulated,
            },
            "engine": {
                "url": self.plan.metrics_url,
                "names_of": self.engine_name,
                "mapping": mapping,
                "samples": len(self.engine.samples),
                "failures": self.engine.failures,
            },
            "missing": missing,
            "notes": self.plan.notes,
        }


def plan_for(
    engine: str,
    gpu_ids: list[str],
    run_host: str | None,
    active_host: str,
    base_url: str,
    enabled: bool,
    telemetry: Telemetry,
) -> Plan:
    """Sample the run's GPUs with its host's nvidia-smi, and the engine's own metrics route."""
    from labctl.host.gpus import inventory as gpu

    if not enabled:
        off = "telemetry was turned off (--no-telemetry)"
        return Plan(None, [], None, None, {"gpu": off, "engine": off})
    missing: dict[str, str] = {}
    command = gpu.nvidia_smi()
    if run_host is not None and run_host != active_host:
        command = None
        missing["gpu"] = f"the run is on host {run_host} but this bench drives {active_host}: pass --host {run_host}"
    elif command is None:
        missing["gpu"] = f"no nvidia-smi on host {active_host} (no NVIDIA GPU there, or not on PATH)"
    notes = []
    if command is not None and run_host is None:
        notes.append(f"an endpoint labctl did not start: every GPU of host {active_host} is sampled")
    root = base_url.removesuffix("/").removesuffix("/v1")
    return Plan(command, list(gpu_ids), root + telemetry.path_of(engine), engine, missing, notes, telemetry)
