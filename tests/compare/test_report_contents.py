"""compare and report of results from two harness engines (local processes, no Docker): the terminal
table within 120 columns, each setup once, engines side by side per level with Δ %, every caveat in the
tables and under the plots, intervals when a result carries them, the page as Chromium draws it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from helpers.harness_proc import harness
from helpers.support import IN_CI, LABCTL, run_labctl

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers

BENCH = ("--workload", "chat-sweep", "--concurrency", "1,4", "--requests", "8", "--input-len", "16")


def labctl(lab: Path, home: Path, *args: str):  # type: ignore[no-untyped-def]
    return run_labctl(*args, lab=lab, env={"LABCTL_HOME": str(home)})


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from helpers.support import REPO

    root = tmp_path_factory.mktemp("report")
    lab, home = root / "lab", root / "home"
    for folder in ("engines", "templates", "workloads", "suites"):
        shutil.copytree(REPO / folder, lab / folder)
    ids: dict = {"lab": lab, "home": home}
    with (
        harness("--ttft-ms", "20", "--tpot-ms", "2", model="m") as (fast, _),
        harness("--ttft-ms", "20", "--tpot-ms", "6", model="m") as (slow, _),
    ):
        for name, base in (("fast", fast), ("slow", slow)):
            done = labctl(
                lab,
                home,
                "bench",
                "run",
                "--base-url",
                f"{base}/v1",
                "--model",
                "m",
                *BENCH,
                "--output-len",
                "8",
                "--json",
            )
            assert done.code == 0, done.stderr
            ids[name] = json.loads(done.stdout)["bench_id"]
        proc = subprocess.Popen(
            [*LABCTL, "bench", "run", "--base-url", f"{slow}/v1", "--model", "m", *BENCH, "--output-len", "400"],
            env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        line = ""
        while " measure: " not in line:  # interrupted while measuring, once the plain progress says so
            line = proc.stderr.readline()
            assert line, "the bench ended before measuring"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 143  # SIGTERM: 128 + 15
        ids["interrupted"] = next(p.stem for p in home.glob("runs/*/bench/*.json") if p.stem not in ids.values())
    return ids


def test_terminal_table_fits_120_columns_with_setups_once(results: dict) -> None:
    shown = labctl(results["lab"], results["home"], "compare", results["fast"], results["slow"])
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120
    assert f"A = external/- ({results['fast']})" in lines and f"B = external/- ({results['slow']})" in lines
    setups = [line for line in lines if line.startswith("   ") and "workload chat-sweep (" in line]
    assert len(setups) == 2  # once per setup, not once per level
    assert "SLO behind goodput: ttft_ms ≤ 2000, tpot_ms ≤ 100" in shown.stdout
    head = next(line for line in lines if line.startswith("level"))
    assert head.split() == ["level", "metric", "A", "B", "Δ", "B", "vs", "A"]
    tpot = next(line for line in lines if line.startswith("c=1") and "TPOT p50" in line).split()
    rows = json.loads(
        labctl(results["lab"], results["home"], "compare", results["fast"], results["slow"], "--json").stdout
    )["rows"]
    a, b = (
        next(r["median_tpot_ms"] for r in rows if r["id"] == results[n] and r["concurrency"] == 1)
        for n in ("fast", "slow")
    )
    # every cell carries its 95 % interval now ("value [lo, hi]"): the Δ is the token ending in %
    assert [t for t in tpot if t.endswith("%")] == [f"{(b - a) / a * 100:+.1f}%"] and b > 2 * a
    assert "c=4    n/N             8/8" in shown.stdout


def test_caveats_in_tables_and_plots(results: dict, tmp_path: Path) -> None:
    lab, home = results["lab"], results["home"]
    refused = labctl(lab, home, "compare", results["fast"], results["interrupted"])
    assert refused.code == 2 and "✗ workload" in refused.stdout  # another --output-len: another workload
    shown = labctl(lab, home, "compare", results["fast"], results["interrupted"], "--allow-mismatch", "--json")
    doc = json.loads(shown.stdout)
    assert "B: the benchmark was interrupted; its last level is partial" in doc["caveats"]
    assert "rule not met: workload (cells marked ✗)" in doc["caveats"]
    caveat_rows = [p for p in doc["pivot"] if p["metric"] == "caveats"]
    assert any("interrupted" in p["cells"][1] for p in caveat_rows)
    out = tmp_path / "r"
    assert labctl(lab, home, "report", results["fast"], results["interrupted"], "-o", str(out)).code == 2
    written = labctl(lab, home, "report", results["fast"], results["interrupted"], "--allow-mismatch", "-o", str(out))
    assert written.code == 0, written.stderr
    md = (out / "report.md").read_text()
    assert "- ✗ B: the benchmark was interrupted; its last level is partial" in md
    clean = tmp_path / "clean"
    labctl(lab, home, "report", results["fast"], results["slow"], "-o", str(clean))
    # the same plots, drawn with the caveats under them and ✗ on the points: not the same pixels
    for name in ("pareto.png", "ttft.png"):
        assert (out / name).stat().st_size != (clean / name).stat().st_size


def test_intervals_and_new_fields_are_shown_when_present(results: dict, tmp_path: Path) -> None:
    """Results written with --repeat carry `<metric>_ci95`, `telemetry` and `requests_file`: shown, not refused."""
    lab, home = results["lab"], results["home"]
    paths = {p.stem: p for p in home.glob("runs/*/bench/*.json")}
    copies = []
    for name, factor in (("fast", 1.0), ("slow", 1.0)):
        doc = json.loads(paths[results[name]].read_text())
        doc["bench_id"] = doc["bench_id"][:-6] + ("aaaaa1" if name == "fast" else "aaaaa2")
        doc["requests_file"] = "requests.jsonl"
        doc["telemetry"] = {"gpu": [], "engine": []}
        for level in doc["levels"]:
            ttft = level["median_ttft_ms"] * factor
            level["median_ttft_ms_ci95"] = [ttft * 0.5, ttft * 2]
        target = paths[results[name]].with_name(doc["bench_id"] + ".json")
        target.write_text(json.dumps(doc))
        copies.append(doc["bench_id"])
    try:
        shown = labctl(lab, home, "compare", *copies)
        assert shown.code == 0, shown.stderr
        row = next(line for line in shown.stdout.splitlines() if line.startswith("c=1") and "TTFT p50" in line)
        assert row.count("[") == 2 and row.rstrip().endswith("≈")  # overlapping intervals: not distinguishable
        written = labctl(lab, home, "report", *copies, "-o", str(tmp_path / "r"))
        assert written.code == 0, written.stderr
        assert "[" in (tmp_path / "r" / "report.md").read_text().split("Side by side per level")[1]
    finally:
        for bench_id in copies:
            next(home.glob(f"runs/*/bench/{bench_id}.json")).unlink()


def test_report_has_the_pareto_plot_and_renders_in_chromium(results: dict, tmp_path: Path) -> None:
    out = tmp_path / "report"
    written = labctl(results["lab"], results["home"], "report", results["fast"], results["slow"], "-o", str(out))
    assert written.code == 0, written.stderr
    md = (out / "report.md").read_text()
    for text in ("![pareto.png](pareto.png)", "| level | metric | A | B | Δ B vs A |", "by labctl", "- A = external/-"):
        assert text in md, text
    assert md.count("| key | engine | profile |") == 1
    page = (out / "index.html").read_text()
    assert "<h2>Side by side per level</h2>" in page and "pareto.png" in page
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if IN_CI:
            pytest.fail("CI=true and chromium is missing: make test installs it", pytrace=False)
        pytest.skip("SKIPPED LOUDLY: chromium is not installed (make test installs it)")
    shot = tmp_path / "page.png"
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}", "--window-size=1400,2400"]
        + [(out / "index.html").as_uri()],
        capture_output=True,
        timeout=120,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    # the explorer, as Chromium runs its script: one point per level and result, each saying its values on hover
    dom = rendered(browser, out / "index.html")
    assert dom.count("<circle") == 4 and dom.count('data-series="A"') == 1 and dom.count('data-series="B"') == 1
    assert "c=4  n/N 8/8" in dom and "TTFT p50 ms: " in dom and "out tok/s: " in dom
    assert '<option value="median_ttft_ms"' in dom and "The explorer needs JavaScript" not in dom
    # a view given in the address: other axes, B hidden (its box unticked), A's points alone
    dom = rendered(browser, out / "index.html", "#x=concurrency&y=median_tpot_ms&hide=B")
    assert dom.count("<circle") == 2 and 'data-series="B"' not in dom and "TPOT p50 ms</text>" in dom


def rendered(browser: str, page: Path, view: str = "") -> str:
    """The page's DOM after its scripts ran in headless Chromium (offline: a file URL, no network)."""
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri() + view],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "<svg" in done.stdout, done.stderr[-2000:]
    return done.stdout
