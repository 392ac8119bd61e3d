"""make bench-up: the harness with a 2 s cold start, 5 times.

Prints (1) how long after the engine first answers its probe `labctl up` declares it ready (engine
side: the container's own timestamped log line when it opened its port; labctl side: when `up`
returned), and (2) the total time of `labctl up` beside `docker compose up -d --wait` with a
1 s-interval healthcheck on the same compose file, measured alternately in the same run.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
LABCTL = [sys.executable, "-m", "labctl"]
RUNS = 5
PORT = 18911
COLD_START = sys.argv[1] if len(sys.argv) > 1 else "2"  # `make bench-up` uses the lab's 2 s


def make_lab(root: Path) -> Path:
    lab = root / "lab"
    shutil.copytree(REPO / "engines", lab / "engines")
    shutil.copytree(REPO / "templates", lab / "templates")
    profile = yaml.safe_load((lab / "engines/harness/profiles/smoke.yaml").read_text())
    profile.update(port=PORT, extra_args=["--cold-start", COLD_START, "--ttft-ms", "5", "--tpot-ms", "1"])
    (lab / "engines/harness/profiles/bench.yaml").write_text(yaml.safe_dump(profile))
    return lab


def serving_at(container: str) -> float:
    logs = subprocess.run(["docker", "logs", "-t", container], capture_output=True, text=True).stdout
    line = next(x for x in logs.splitlines() if "harness: serving" in x)
    stamp = line.split()[0]  # RFC 3339 with nanoseconds
    base, frac = stamp.rstrip("Z").split(".")
    when = dt.datetime.fromisoformat(base).replace(tzinfo=dt.UTC)
    return when.timestamp() + float("0." + frac)


def labctl_once(env: dict[str, str]) -> tuple[float, float]:
    start = time.time()
    proc = subprocess.run(
        [*LABCTL, "up", "harness", "--profile", "bench", "--allow-unpinned", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    end = time.time()
    info = json.loads(proc.stdout)
    record = json.loads(Path(info["record"]).read_text())
    lag = end - serving_at(record["container"]["id"])
    subprocess.run([*LABCTL, "down", info["run_id"]], capture_output=True, env=env, check=True)
    return end - start, lag


def compose_once(path: Path) -> float:
    start = time.time()
    subprocess.run(
        ["docker", "compose", "-p", "bench-wait", "-f", str(path), "up", "-d", "--wait"],
        check=True,
        capture_output=True,
    )
    elapsed = time.time() - start
    subprocess.run(
        ["docker", "compose", "-p", "bench-wait", "-f", str(path), "down", "-t", "2"], check=True, capture_output=True
    )
    return elapsed


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        lab = make_lab(Path(tmp))
        env = {**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(Path(tmp) / "home")}
        rendered = subprocess.run(
            [*LABCTL, "render", "harness", "--profile", "bench", "--stdout"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
        doc = yaml.safe_load(rendered)
        doc["services"]["serve"]["healthcheck"] = {
            "test": [
                "CMD",
                "python3",
                "-c",
                f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{PORT}/health')",
            ],
            "interval": "1s",
            "timeout": "1s",
            "retries": 60,
        }
        waited = Path(tmp) / "compose-wait.yaml"
        waited.write_text(yaml.safe_dump(doc))
        ups, lags, composes = [], [], []
        for _ in range(RUNS):  # alternate, so drift on this noisy machine hits both sides alike
            total, lag = labctl_once(env)
            ups.append(total)
            lags.append(lag)
            composes.append(compose_once(waited))
    print(f"bench-up: harness with a {COLD_START} s cold start, {RUNS} runs each, alternating")
    print(
        f"(1) engine answered its probe -> labctl up returned: median {statistics.median(lags) * 1000:.0f} ms "
        f"(runs: {', '.join(f'{x * 1000:.0f}' for x in lags)}); target <= 300 ms: "
        f"{'met' if statistics.median(lags) <= 0.3 else 'MISSED'}"
    )
    ratio = statistics.median(ups) / statistics.median(composes)
    print(
        f"(2) labctl up total: median {statistics.median(ups):.2f} s; docker compose up -d --wait (1 s healthcheck): "
        f"median {statistics.median(composes):.2f} s; ratio labctl/compose {ratio:.2f} (target <= 1.00: "
        f"{'met' if ratio <= 1.0 else 'MISSED'})"
    )
    print("    labctl's total includes preflight, image inspection, the record, /v1/models and one chat completion.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
