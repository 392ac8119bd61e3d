"""make bench-cli: median wall time of the commands people type most (target: each <= 0.35 s)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LABCTL = str(Path(sys.executable).parent / "labctl")
COMMANDS = [["--help"], ["render", "harness", "--profile", "smoke", "--stdout"], ["validate"]]
RUNS = 10
TARGET = 0.35


def main() -> int:
    worst = 0.0
    for args in COMMANDS:
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            subprocess.run([LABCTL, *args], cwd=REPO, check=True, capture_output=True)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        worst = max(worst, median)
        print(
            f"labctl {' '.join(args):<45} median {median * 1000:6.0f} ms  (min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}, n={RUNS})"
        )
    print(f"target <= {TARGET * 1000:.0f} ms each: {'met' if worst <= TARGET else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
