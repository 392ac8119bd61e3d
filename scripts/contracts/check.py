"""`make contract-check [CASES=cases.json]`: first the HTTP-surface check (http_check.py: engine.yaml's
probes and the personas against engines/*/http/*.yaml, no wheel needed), then run the pinned engines' OWN
CLI code on argv lists and compare its verdict (refused or accepted) with labctl's `check_argv`.
`--http-only` stops after the first part.

Cases: a JSON list of {"engine", "version", "command", "argv", "label"} (argv = the words after
the command's argv0). Without CASES a built-in list runs. Only vLLM and SGLang can be run (their
wheels are on PyPI); cases for other engines are reported as labctl-only and never count as a
mismatch. Exits 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
import http_check  # noqa: E402
import venvs  # noqa: E402

from labctl.catalog.contracts import check_argv, contract_path, has_errors, load_contract  # noqa: E402

# Known-good command lines from engines.md, shared with tests/catalog/test_contracts.py.
KNOWN_GOOD = json.loads((HERE / "known_good.json").read_text())
M = KNOWN_GOOD["model"]
VLLM_GOOD = KNOWN_GOOD["vllm"]
SGL_GOOD = KNOWN_GOOD["sglang"]


def builtin_cases() -> list[dict]:
    cases = []
    for ver in ("0.34.0", "0.11.0"):
        v = lambda label, argv, ver=ver: cases.append(  # noqa: E731
            {"engine": "vllm", "version": ver, "command": "serve", "argv": argv, "label": label}
        )
        v("known-good (engines.md)", VLLM_GOOD)
        v("--model instead of positional", ["--model", M, "--port", "8000"])
        v("unknown flag --tp", [M, "--tp", "2"])
        v("bad choice --kv-cache-dtype fp9", [M, "--kv-cache-dtype", "fp9"])
        v("missing value --port", [M, "--port"])
        v("--port=notanint", [M, "--port=notanint"])
        v("--x=value form", [M, "--max-model-len=32768", "--port=8000"])
        v("prefix caching flag", [M, "--enable-prefix-caching"])
    for ver in ("0.5.23", "0.5.19"):
        s = lambda label, argv, ver=ver: cases.append(  # noqa: E731
            {"engine": "sglang", "version": ver, "command": "launch_server", "argv": argv, "label": label}
        )
        s("known-good (engines.md)", SGL_GOOD)
        s("--tp abbreviation", ["--model-path", M, "--tp", "2"])
        s("unknown flag --max-model-len", ["--model-path", M, "--max-model-len", "32768"])
        s("bad choice --kv-cache-dtype fp9", ["--model-path", M, "--kv-cache-dtype", "fp9"])
        s("missing value --port", ["--model-path", M, "--port"])
        s("--x=value form", ["--model-path=" + M, "--tp-size=2", "--port=30000"])
        s("positional model (not accepted)", [M, "--port", "30000"])
        s("ambiguous abbreviation --enable", ["--model-path", M, "--enable"])
    return cases


def profile_cases() -> list[dict]:
    """The rendered command line of every shipped profile, plain and resident, on 1 and 2 GPUs."""
    from labctl.catalog.engines import list_engine_names
    from labctl.catalog.lab import Lab
    from labctl.catalog.profiles import list_profile_names, load_profile
    from labctl.compose.contract_check import _build_argv, with_gpus
    from labctl.compose.render import SECRETS_TARGET, serve_command

    lab = Lab(ROOT)
    cases = []
    for engine in list_engine_names(lab):
        for name in list_profile_names(lab, engine):
            profile = load_profile(lab, engine, name)
            contract = profile.engine.spec["contract"]
            if contract is None:
                continue
            version = profile.spec["engine_version"]
            for gpus in (1, 2):
                for resident in (False, True):
                    placed = with_gpus(profile, gpus)
                    serve = serve_command(placed, f"{SECRETS_TARGET}/api_key" if resident else None)
                    words = serve.entrypoint + [w.text for w in serve.argv + serve.auth_argv]
                    command = load_contract(contract_path(ROOT / "engines", engine, version)).commands[
                        contract["serve"]
                    ]
                    label = f"profile {name} {gpus} GPU{'s' if gpus > 1 else ''}{' resident' if resident else ''}"
                    argv = words[len(command.argv0) :]
                    cases.append(
                        {
                            "engine": engine,
                            "version": version,
                            "command": contract["serve"],
                            "argv": argv,
                            "label": label,
                        }
                    )
                if profile.spec["build"] and contract.get("build"):
                    argv = [w.text for w in _build_argv(with_gpus(profile, gpus))][1:]
                    cases.append(
                        {
                            "engine": engine,
                            "version": version,
                            "command": contract["build"],
                            "argv": argv,
                            "label": f"profile {name} build {gpus} GPU(s)",
                        }
                    )
    return cases


def engine_verdicts(engine: str, version: str, cases: list[dict]) -> list[dict]:
    py, _ = venvs.ensure(engine, version)
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "in.json", Path(tmp) / "out.json"
        inp.write_text(json.dumps(cases))
        subprocess.run(
            [str(py), str(HERE / "argparse_contract.py"), "run", engine, str(inp), "--out", str(out)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return json.loads(out.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", type=Path)
    ap.add_argument("--http-only", action="store_true", help="only the HTTP-surface check")
    a = ap.parse_args()
    http_failed = 0
    if not a.cases:
        http_failed = http_check.main()
        print()
        if a.http_only:
            return http_failed
    cases = json.loads(a.cases.read_text()) if a.cases else builtin_cases() + profile_cases()
    t0 = time.monotonic()
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, c in enumerate(cases):
        groups[(c["engine"], c["version"])].append(i)
    engine_says: dict[int, dict] = {}
    for (engine, version), idx in groups.items():
        if engine not in ("vllm", "sglang"):
            continue
        for i, v in zip(idx, engine_verdicts(engine, version, [cases[i] for i in idx]), strict=True):
            engine_says[i] = v
    rows, mismatches = [], 0
    for i, c in enumerate(cases):
        contract = (
            load_contract(contract_path(ROOT / "engines", c["engine"], c["version"]))
            if not (c["engine"] == "vllm" and c["version"] == "0.11.0")
            else load_contract(ROOT / "tests/fixtures/contracts/vllm-0.11.0.yaml")
        )
        findings = check_argv(contract.commands[c["command"]], c["argv"])
        ours = "error" if has_errors(findings) else ("warn" if findings else "ok")
        eng = engine_says.get(i)
        if eng is None:
            verdict, result = "-", "LABCTL-ONLY"
        else:
            verdict = eng["verdict"]
            same = (verdict == "error") == (ours == "error")
            result = "MATCH" if same else "MISMATCH"
            mismatches += not same
        note = (findings[0].message if findings else "") if ours != "ok" else ""
        rows.append(
            (
                f"{c['engine']} {c['version']}",
                c.get("label", ""),
                verdict,
                ours,
                result,
                (eng or {}).get("detail", "")[:90],
                note[:90],
            )
        )
    w = [max(len(r[k]) for r in rows + [("engine", "case", "engine", "labctl", "result", "", "")]) for k in range(5)]
    head = ("engine", "case", "engine", "labctl", "result")
    print("  ".join(h.ljust(w[k]) for k, h in enumerate(head)))
    for r in rows:
        print("  ".join(r[k].ljust(w[k]) for k in range(5)))
        if r[5]:
            print(f"      engine: {r[5]}")
        if r[6]:
            print(f"      labctl: {r[6]}")
    print(f"{len(rows)} cases, {mismatches} mismatch(es), {time.monotonic() - t0:.1f}s")
    return 1 if mismatches or http_failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
