"""make bench-client: is labctl's load generator exact? It runs `labctl bench` against a local harness
engine whose truth is known (TTFT 50 ms, TPOT 20 ms) at concurrency 1, 64, 128, 256 (64 output tokens,
10x concurrency requests, warm-up at the same concurrency) and prints reported vs true medians; then
with TPOT 0 it measures the streamed tokens/s that pass through the client; then at 512 and 600 streams,
with telemetry sampling on, the receive lag: when labctl received each first token minus when the
harness wrote it (both CLOCK_MONOTONIC on this machine, joined by X-Request-Id). Last, the top load: 1 to 2,000
streams (the seed's unlimited level is 1,200 in flight) with the harness on core 0 and the client on core 1,
labctl beside a lean reference client (scripts/reference_client.py) on the same harness: median TTFT error against
the truth, receive lag, and the client's CPU per streamed token; with three cores or more, labctl with its streams
over worker processes (--client-workers), each on a core of its own, from 256 streams."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

LABCTL = [sys.executable, "-m", "labctl"]
TTFT, TPOT = 50.0, 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def harness(*args: str, core: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            *pinned(core),
            sys.executable,
            "-m",
            "labctl.harness",
            "--model",
            "truth",
            "--port",
            str(port),
            "--max-num-seqs",
            "1024",
            "--max-model-len",
            "65536",
            *args,
        ],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.05)
    raise SystemExit("harness did not start")


def pinned(core: str | None) -> list[str]:
    """taskset onto one core, where there is more than one and taskset is here (else unpinned, said in the heading)."""
    return ["taskset", "-c", core] if core and shutil.which("taskset") and (os.cpu_count() or 1) >= 2 else []


def bench(base: str, home: str, *args: str, host: list[str] | None = None, core: str | None = None) -> dict:
    out = subprocess.run(
        [
            *pinned(core),
            *LABCTL,
            *(host or []),
            "bench",
            "--base-url",
            base,
            "--model",
            "truth",
            "--workload",
            "chat-sweep",
            "--input-len",
            "128",
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "LABCTL_HOME": home},
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout)


SIM_SMI = "/var/lib/labctl-sim/bin/nvidia-smi"
SIM_CONFIG = "/var/lib/labctl-sim/sim-h100.json"


def gpu_host(home: str) -> list[str]:
    """With the simulated lab's nvidia-smi stand-in present, GPU sampling runs too (a child process a
    second, as on a real host); without it only the engine's /metrics is sampled."""
    if not (os.path.exists(SIM_SMI) and os.path.exists(SIM_CONFIG)):
        return []
    path = os.path.join(home, "hosts.yaml")
    with open(path, "w") as f:
        json.dump({"hosts": {"sim-gpus": {"docker": "local", "nvidia_smi": [SIM_SMI, "--sim-config", SIM_CONFIG]}}}, f)
    os.environ["LABCTL_HOSTS"] = path
    return ["--host", "sim-gpus"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = int(position), min(int(position) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def receive_lags(base: str, home: str, result: dict) -> list[float]:
    """ms between the harness writing each first token and labctl receiving it."""
    root = base.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/harness/first-tokens", timeout=30) as answer:
        written = json.load(answer)
    path = os.path.join(home, "runs", result["run_id"], "bench", result["requests_file"])
    lags = []
    with open(path) as lines:
        for raw in lines:
            line = json.loads(raw)
            if line.get("ok") and line["request_id"] in written:
                lags.append((line["sent"] + line["ttft_ms"] / 1000 - written[line["request_id"]]) * 1000)
    return lags


def lag_levels(home: str) -> None:
    host = gpu_host(home)
    print(
        f"receive lag at 512 and 600 streams (TTFT {TTFT:.0f} ms, TPOT {TPOT:.0f} ms, 64 tokens, 10x requests), "
        f"telemetry on: engine /metrics{' and the simulated nvidia-smi' if host else ''} sampled every second"
    )
    print(
        f"{'conc':>5} {'lag p50':>8} {'lag p99':>8} {'lag max':>8} {'n':>6} {'client CPU':>11}  target p50 <= 2 ms, p99 <= 10 ms"
    )
    for conc in (512, 600):
        proc, base = harness("--ttft-ms", str(TTFT), "--tpot-ms", str(TPOT))
        try:
            result = bench(base, home, "--concurrency", str(conc), "--output-len", "64", host=host)
            lags = receive_lags(base, home, result)
        finally:
            proc.terminate()
            proc.wait()
        level = result["levels"][0]
        p50, p99 = percentile(lags, 50), percentile(lags, 99)
        verdict = "met" if p50 <= 2 and p99 <= 10 else "MISSED"
        print(
            f"{conc:>5} {p50:>8.2f} {p99:>8.2f} {max(lags):>8.2f} {len(lags):>6} {level['client_cpu_share']:>10.0%}  "
            f"{verdict}  (telemetry: {result['telemetry']['engine']['samples']} engine, "
            f"{result['telemetry']['gpu']['samples']} GPU samples)"
        )


TOP_LEVELS = (1, 64, 256, 600, 1200, 2000)
# --client-workers: one worker per core beside the truth server's, up to four; none on a 2-core machine, where
# the workers would share the one client core (no more CPU, only the coordination's cost)
WORKERS = min(4, (os.cpu_count() or 1) - 1) if (os.cpu_count() or 1) >= 3 and shutil.which("taskset") else 1
REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_client.py")


def first_tokens(base: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{base.removesuffix('/v1')}/harness/first-tokens", timeout=60) as answer:
        return dict(json.load(answer))


def reference(base: str, home: str, conc: int, requests: int) -> tuple[list[float], list[float], float, int]:
    """The lean client at `conc` streams on core 1: its TTFTs and receive lags (ms), CPU seconds, tokens."""
    out = os.path.join(home, f"reference-{conc}.jsonl")
    done = subprocess.run(
        [*pinned("1"), sys.executable, REFERENCE, "--url", base.removesuffix("/v1"), "--model", "truth"]
        + ["--concurrency", str(conc), "--requests", str(requests), "--output-len", "64", "--out", out],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    written = first_tokens(base)
    ttfts, lags, tokens = [], [], 0
    with open(out) as lines:
        for raw in lines:
            line = json.loads(raw)
            tokens += line["chunks"]
            if line["ok"]:
                ttfts.append((line["first"] - line["sent"]) * 1000)
                if line["request_id"] in written:
                    lags.append((line["first"] - written[line["request_id"]]) * 1000)
    return ttfts, lags, float(json.loads(done.stdout)["cpu_s"]), tokens


def labctl_row(home: str, conc: int, requests: int, cores: str, *more: str) -> tuple[dict, tuple]:
    """labctl on `cores` against a fresh harness on core 0: its level, and its row (TTFT p50, receive lags, CPU
    seconds, tokens, completed)."""
    proc, base = harness("--ttft-ms", str(TTFT), "--tpot-ms", str(TPOT), core="0")
    try:
        result = bench(
            base, home, "--concurrency", str(conc), "--output-len", "64", "--requests", str(requests),
            "--no-telemetry", *more, core=cores,
        )  # fmt: skip
        lags = receive_lags(base, home, result)
    finally:
        proc.terminate()
        proc.wait()
    level = result["levels"][0]
    cpu = level["client_cpu_share"] * level["duration_s"]
    return level, (level["median_ttft_ms"], lags, cpu, level["total_output_tokens"], level["completed"])


def top_load(home: str) -> None:
    """labctl and the reference, one after the other on a fresh harness per run, at each level up to 2,000 streams."""
    cores = "harness on core 0, client on core 1" if pinned("0") else "unpinned (one core, or no taskset)"
    print(
        f"\ntop load: TTFT {TTFT:.0f} ms, TPOT {TPOT:.0f} ms, 64 tokens, max(16, 2x concurrency) requests; {cores}; "
        "no telemetry (the reference has none)"
    )
    print(
        f"sharded rows (labctl x{WORKERS}, --client-workers {WORKERS} on cores 1-{WORKERS}) from 256 streams"
        if WORKERS > 1
        else f"no sharded rows: {os.cpu_count()} cores leave none beside the truth server's and the one client core"
    )
    print(
        f"{'conc':>5} {'client':>9} {'TTFT p50':>9} {'error':>7} {'lag p50':>8} {'lag p99':>8} {'CPU us/tok':>11} "
        f"{'n':>6}  goals: lag p99 <= 10 ms; labctl's TTFT error no worse than the reference's"
    )
    for conc in TOP_LEVELS:
        requests = max(16, 2 * conc)
        rows = {}
        level, rows["labctl"] = labctl_row(home, conc, requests, "1")
        proc, base = harness("--ttft-ms", str(TTFT), "--tpot-ms", str(TPOT), core="0")
        try:
            ttfts, ref_lags, ref_cpu, ref_tokens = reference(base, home, conc, requests)
        finally:
            proc.terminate()
            proc.wait()
        rows["reference"] = (percentile(ttfts, 50), ref_lags, ref_cpu, ref_tokens, len(ttfts))
        if WORKERS > 1 and conc >= 256:  # the streams over worker processes, each on a core of its own
            _, rows[f"labctl x{WORKERS}"] = labctl_row(
                home, conc, requests, f"1-{WORKERS}", "--client-workers", str(WORKERS)
            )
        for name, (ttft, found, used, tokens, n) in rows.items():
            print(
                f"{conc:>5} {name:>9} {ttft:>9.2f} {ttft / TTFT - 1:>+7.1%} {percentile(found, 50):>8.2f} "
                f"{percentile(found, 99):>8.2f} {used / max(tokens, 1) * 1e6:>11.1f} {n:>6}"
            )
        errors = {name: abs(row[0] / TTFT - 1) for name, row in rows.items()}
        p99 = percentile(rows["labctl"][1], 99)
        flags = "; ".join(level.get("warnings") or []) or "no client warning"
        print(
            f"{'':>5} {'':>9} lag p99 {'met' if p99 <= 10 else 'MISSED'}; TTFT error "
            f"{'no worse than' if errors['labctl'] <= errors['reference'] + 0.005 else 'WORSE than'} the reference's "
            f"(0.5-point tolerance); labctl said: {flags[:160]}"
        )


def main() -> int:
    home = tempfile.mkdtemp(prefix="labctl-bench-client-")
    proc, base = harness("--ttft-ms", str(TTFT), "--tpot-ms", str(TPOT))
    try:
        result = bench(base, home, "--concurrency", "1,64,128,256", "--output-len", "64")
    finally:
        proc.terminate()
        proc.wait()
    print(
        f"bench-client: harness truth TTFT {TTFT:.0f} ms, TPOT {TPOT:.0f} ms; 64 output tokens, 10x concurrency "
        f"requests, warm-up at the same concurrency; client and server share {os.cpu_count()} cores"
    )
    print(
        f"{'conc':>5} {'TTFT p50':>9} {'error':>7} {'TPOT p50':>9} {'error':>7} {'client CPU':>11}  verdict (TTFT within 5 %, TPOT within 1 %)"
    )
    for level in result["levels"]:
        ttft_err = level["median_ttft_ms"] / TTFT - 1
        tpot_err = level["median_tpot_ms"] / TPOT - 1
        ok = abs(ttft_err) <= 0.05 and abs(tpot_err) <= 0.01
        print(
            f"{level['concurrency']:>5} {level['median_ttft_ms']:>9.2f} {ttft_err:>+7.1%} {level['median_tpot_ms']:>9.3f} "
            f"{tpot_err:>+7.2%} {level['client_cpu_share']:>10.0%}  {'met' if ok else 'MISSED'}"
        )
    proc, base = harness("--ttft-ms", "0", "--tpot-ms", "0")
    try:
        result = bench(base, home, "--concurrency", "256", "--output-len", "256", "--requests", "2560")
    finally:
        proc.terminate()
        proc.wait()
    level = result["levels"][0]
    rate = level["output_throughput"]
    print(
        f"TPOT 0, 256 streams, 256 tokens each: {rate:,.0f} streamed tokens/s through the client "
        f"(client CPU {level['client_cpu_share']:.0%}); target >= 20,000: {'met' if rate >= 20000 else 'MISSED'}"
    )
    lag_levels(home)
    top_load(home)
    print(f"(load average now {', '.join(f'{x:.1f}' for x in os.getloadavg())}: other work on this machine counts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
