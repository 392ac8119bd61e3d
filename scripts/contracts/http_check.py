"""Check engine.yaml's probes and the engine personas against the HTTP-surface contracts
(engines/<engine>/http/<version>.yaml): the part of `make contract-check` that needs no engine wheel.

engine.yaml: the readiness probe, the version endpoint and the metrics endpoint must be GET routes of every
contract version of that engine, present without a condition and not deprecated; a metrics route that the
engine serves only with an option (SGLang's --enable-metrics) must be switched on by every profile that
pins that version; every common metric labctl's telemetry maps must have a source the version exports.

Personas: each shipped profile's command line is given to the persona, which then serves on loopback (in
this process, real HTTP). Every path of the contract, plus every path any persona or contract knows, is
requested with and without the key: a path the persona answers must be a route of the contract; the key
must guard exactly what the contract says; the metrics route must answer only when the contract's enabling
options are on the command line, and its metric names must be the engine's own.
"""

from __future__ import annotations

import asyncio
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from labctl.catalog.http_contracts import HttpContract, load_http_contract  # noqa: E402

KEY = "contract-check-key"
PERSONA_ENGINES = ("vllm", "sglang", "trtllm", "atlas")
HARNESS_OWN = ("/harness/",)  # the harness's own measurement routes, not an engine's
_HISTOGRAM_PARTS = re.compile(r"_(bucket|sum|count|created)$")
# An enabling option that takes a file: what the file must say for the engine to serve its metrics.
OPTION_FILES = {"--extra_llm_api_options": "return_perf_metrics: true\n"}
# Reviewed differences, each with its reason: shown as KNOWN, not counted as mismatches.
KNOWN: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Row:
    engine: str
    subject: str
    check: str
    expected: str
    found: str
    ok: bool


def contracts(engines_dir: Path) -> dict[str, dict[str, HttpContract]]:
    out: dict[str, dict[str, HttpContract]] = {}
    for path in sorted(engines_dir.glob("*/http/*.yaml")):
        c = load_http_contract(path)
        out.setdefault(c.engine, {})[c.version] = c
    return out


def _route_row(engine: str, c: HttpContract, what: str, path: str | None) -> Row:
    label = f"{engine} {c.version}"
    if path is None:
        return Row(label, "engine.yaml", what, "-", "none", True)
    route = c.route_for(path, "GET")
    if route is None:
        return Row(label, "engine.yaml", what, "a GET route", f"{path}: no such route", False)
    if route.when is not None and route.path != c.metrics_route:
        return Row(label, "engine.yaml", what, "unconditional", f"{path}: only when {route.when}", False)
    if route.deprecated is not None:
        return Row(label, "engine.yaml", what, "not deprecated", f"{path}: {route.deprecated}", False)
    return Row(label, "engine.yaml", what, "a GET route", path, True)


def _telemetry_row(name: str, c: HttpContract) -> Row:
    """labctl's telemetry mapping (labctl/catalog/engine_metrics.py) reads names this version exports."""
    from labctl.catalog.engines import lab_telemetry
    from labctl.catalog.lab import Lab

    names = lab_telemetry(Lab(ROOT)).names
    mapping = names.get(name) or names.get("vllm" if name == "vllm-cpu" else name, {})  # vllm-cpu: vLLM's names
    exported = set(c.metric_names)
    missing = [
        common
        for common, sources in mapping.items()
        if sources and not any(s.metric in exported and (s.per is None or s.per in exported) for s in sources)
    ]
    return Row(
        f"{name} {c.version}",
        "telemetry mapping",
        "mapped names are exported",
        "each mapped metric",
        ("none for " + ", ".join(missing)) if missing else "all",
        not missing,
    )


def check_engine_files(lab_root: Path = ROOT) -> list[Row]:
    from labctl.catalog.engines import list_engine_names, load_engine
    from labctl.catalog.lab import Lab
    from labctl.catalog.profiles import list_profile_names, load_profile
    from labctl.compose.render import serve_command

    lab = Lab(lab_root)
    by_engine = contracts(lab_root / "engines")
    rows: list[Row] = []
    for name in list_engine_names(lab):
        engine = load_engine(lab, name)
        if engine.spec["contract"] is None:
            continue  # the plain harness: no engine of its own
        versions = by_engine.get(name, {})
        if not versions:
            rows.append(Row(name, "engine.yaml", "HTTP contract", "engines/NAME/http/V.yaml", "none", False))
            continue
        for c in versions.values():
            rows.append(_route_row(name, c, "readiness probe", engine.spec["readiness"]["probe"]))
            rows.append(_route_row(name, c, "version endpoint", engine.version_path))
            metrics = engine.metrics_path
            rows.append(_route_row(name, c, "metrics endpoint", metrics))
            if metrics is not None and metrics != c.metrics_route:
                rows.append(
                    Row(f"{name} {c.version}", "engine.yaml", "metrics route", str(c.metrics_route), metrics, False)
                )
            has_key = engine.spec["auth"]["kind"] != "none"
            rows.append(
                Row(
                    f"{name} {c.version}",
                    "engine.yaml",
                    "key mechanism",
                    c.key.mechanism if c.key else "none",
                    "yes" if has_key else "none",
                    has_key == (c.key is not None),
                )
            )
        for c in versions.values():
            rows.append(_telemetry_row(name, c))
        for pname in list_profile_names(lab, name):
            profile = load_profile(lab, name, pname)
            c = versions.get(str(profile.spec["engine_version"]))
            if c is None:
                rows.append(
                    Row(name, f"profile {pname}", "HTTP contract", str(profile.spec["engine_version"]), "none", False)
                )
                continue
            if not c.metrics_enabled_by:
                continue
            serve = serve_command(profile, None)
            found = _switched_on(engine, c, [w.text for w in serve.argv])
            expected = " ".join(
                f"{f} ({OPTION_FILES[f].strip()})" if f in OPTION_FILES else f for f in c.metrics_enabled_by
            )
            rows.append(
                Row(f"{name} {c.version}", f"profile {pname}", "metrics switched on", expected, found, found == "yes")
            )
    return rows


def _switched_on(engine: object, c: HttpContract, words: list[str]) -> str:
    """ "yes" when the rendered command line gives every enabling option, and an options file among them
    says what the engine needs; else what is missing."""
    import yaml

    if not c.serves_metrics(words):
        return "not rendered"
    options_file = engine.options_file  # type: ignore[attr-defined]
    for flag in c.metrics_enabled_by:
        if flag not in OPTION_FILES:
            continue
        if options_file is None or options_file.flag != flag:
            return f"{flag}: not labctl's options file"
        needed = yaml.safe_load(OPTION_FILES[flag])
        missing = {k: v for k, v in needed.items() if options_file.content.get(k) != v}
        if missing:
            return f"{flag}: the options file lacks {yaml.safe_dump(missing, default_flow_style=True).strip()}"
    return "yes"


# ------------------------------------------------------------------ personas


async def _get(port: int, method: str, path: str, key: str | None) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b"{}" if method == "POST" else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
    if body:
        head += "Content-Type: application/json\r\n"
    if key:
        head += f"Authorization: Bearer {key}\r\n"
    writer.write(head.encode() + b"\r\n" + body)
    await writer.drain()
    data = await reader.read()
    writer.close()
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


async def _serve_persona(
    engine: str, version: str, argv: list[str], env: dict[str, str], probes: list[tuple[str, str, str | None]]
) -> list[tuple[int, bytes]]:
    from labctl.harness.personas import build_persona
    from labctl.harness.server import Harness

    persona, settings = build_persona(engine, version, argv, env)
    harness = Harness(settings, persona)
    harness.opened_at = harness.loop.time() - 3600  # warmed up: the check is about routes, not start-up
    server = await asyncio.start_server(harness.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        slots = asyncio.Semaphore(32)  # under the listen backlog: an overflowing SYN waits a second to retry

        async def one(method: str, path: str, key: str | None) -> tuple[int, bytes]:
            async with slots:
                return await _get(port, method, path, key)

        return list(await asyncio.gather(*(one(m, p, k) for m, p, k in probes)))


def _metric_names(text: bytes) -> set[str]:
    names = set()
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def _known_paths(all_contracts: dict[str, dict[str, HttpContract]]) -> set[str]:
    from labctl.catalog.engines import lab_telemetry
    from labctl.catalog.lab import Lab

    paths = {_concrete(r.path) for versions in all_contracts.values() for c in versions.values() for r in c.routes}
    metrics = set(lab_telemetry(Lab(ROOT)).paths.values()) - {"/metrics"}  # the personas serve these too
    return paths | metrics | {"/get_server_info", "/server_info", "/ready", "/version"}


def _persona_words(
    engine: str, argv: list[str], key: str | None, metrics_on: bool, c: HttpContract
) -> tuple[list[str], dict[str, str]]:
    """The persona's argv (minus the profile's metrics switch when `metrics_on` is false) and environment."""
    env = {"NVIDIA_VISIBLE_DEVICES": "all", "LABCTL_PERSONA_LOAD_S": "0", "LABCTL_PERSONA_WARMUP_S": "0"}
    words = list(argv)
    if not metrics_on:
        words = _without_options(words, c.metrics_enabled_by)
    elif not c.serves_metrics(words):
        for flag in c.metrics_enabled_by:
            words.append(flag)
            if flag in OPTION_FILES:
                words.append(_option_file(flag))
    if key:
        if engine == "vllm":
            env["VLLM_API_KEY"] = key
        elif engine == "sglang":
            words += ["--api-key", key]
        elif engine == "atlas":
            words += ["--require-auth", "--auth-token", key]
    return words, env


def _without_options(words: list[str], flags: tuple[str, ...]) -> list[str]:
    """The command line minus these options, and the file named after those that take one."""
    out: list[str] = []
    skip = False
    for word in words:
        name, eq, _ = word.partition("=")
        if skip:
            skip = False
        elif name in flags:
            skip = name in OPTION_FILES and not eq
        else:
            out.append(word)
    return out


def _option_file(flag: str) -> str:
    return _written(OPTION_FILES[flag])


def _persona_argv(lab_root: Path, profile: object, engine: str, version: str) -> list[str]:
    """What follows the engine's executable in the profile's rendered command (`serve …` for vLLM, Atlas)."""
    from labctl.catalog.contracts import contract_path, load_contract
    from labctl.compose.render import serve_command
    from labctl.harness.personas import SUBCOMMAND

    serve = serve_command(profile, None)  # type: ignore[arg-type]
    contract = load_contract(contract_path(lab_root / "engines", engine, version))
    command = contract.commands[profile.engine.spec["contract"]["serve"]]  # type: ignore[attr-defined]
    cut = len(command.argv0) - (1 if engine in SUBCOMMAND else 0)
    words = (list(serve.entrypoint) + [w.text for w in serve.argv])[cut:]
    options_file = profile.engine.options_file  # type: ignore[attr-defined]
    if options_file is not None:  # in the container Compose mounts it at its target; here, a file of the same text
        local = _written(options_file.text)
        words = [local if w == options_file.target else w for w in words]
    return words


def _written(text: str) -> str:
    import atexit
    import os
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="contract-check-", delete=False) as f:
        f.write(text)
    atexit.register(os.unlink, f.name)  # the personas read it while they serve, in this process
    return f.name


def _check_persona(engine: str, c: HttpContract, argv: list[str], known: list[str], subject: str) -> list[Row]:
    label = f"{engine} {c.version}"
    key = KEY if c.key is not None else None
    # every path with the key; every contract route without it; then the metrics and readiness routes
    guarded_paths = sorted({_concrete(r.path) for r in c.routes if "WEBSOCKET" not in r.methods})
    methods = ["GET" if "GET" in c.route_for(p).methods else c.route_for(p).methods[0] for p in guarded_paths]  # type: ignore[union-attr]
    probes = [("GET", p, key) for p in known]
    probes += [(m, p, None) for m, p in zip(methods, guarded_paths, strict=True)] if key else []
    probes += [("GET", c.metrics_route or "/", key), ("GET", c.readiness_route, key)]
    words, env = _persona_words(engine, argv, key, True, c)
    answers = asyncio.run(_serve_persona(engine, c.version, words, env, probes))
    with_key, bare = answers[: len(known)], answers[len(known) : len(answers) - 2]
    (metrics_status, metrics_body), (ready_status, _) = answers[-2:]
    rows = []
    served = {p for p, (status, _) in zip(known, with_key, strict=True) if status not in (404, 405)}
    extra = sorted(p for p in served if not c.has_route(p) and not p.startswith(HARNESS_OWN))
    rows.append(Row(label, subject, "serves only contract routes", "none extra", ", ".join(extra) or "none", not extra))
    if c.key is not None:
        wrong = [
            f"{m} {p}: {status}, engine {'401' if c.route_for(p).key_guarded else 'open'}"  # type: ignore[union-attr]
            for m, p, (status, _) in zip(methods, guarded_paths, bare, strict=True)
            if (status == 401) != c.route_for(p).key_guarded  # type: ignore[union-attr]
        ]
        rows.append(
            Row(
                label, subject, "key guards what the engine's does", c.key.guards, "; ".join(wrong) or "same", not wrong
            )
        )
    if c.metrics_route is not None:
        if metrics_status != 200:
            rows.append(Row(label, subject, f"{c.metrics_route} switched on", "200", str(metrics_status), False))
        else:
            names = {_HISTOGRAM_PARTS.sub("", n) for n in _metric_names(metrics_body)}
            # a counter's NAME_created series strips to NAME, beside its NAME_total
            unknown = sorted(n for n in names if n not in c.metric_names and f"{n}_total" not in c.metric_names)
            rows.append(
                Row(label, subject, "metric names are the engine's", "all", ", ".join(unknown) or "all", not unknown)
            )
        if c.metrics_enabled_by:
            words, env = _persona_words(engine, argv, key, False, c)
            ((off, _),) = asyncio.run(_serve_persona(engine, c.version, words, env, [("GET", c.metrics_route, key)]))
            check = f"{c.metrics_route} without {' '.join(c.metrics_enabled_by)}"
            rows.append(Row(label, subject, check, "404", str(off), off == 404))
    rows.append(Row(label, subject, f"readiness {c.readiness_route}", "200", str(ready_status), ready_status == 200))
    return rows


def check_personas(lab_root: Path = ROOT) -> list[Row]:
    from labctl.catalog.lab import Lab
    from labctl.catalog.profiles import list_profile_names, load_profile

    lab = Lab(lab_root)
    all_contracts = contracts(lab_root / "engines")
    known = sorted(_known_paths(all_contracts))
    rows: list[Row] = []
    for engine in PERSONA_ENGINES:
        names = list_profile_names(lab, engine)
        if not names:
            continue
        profile = load_profile(lab, engine, names[0])  # one command line per engine: routes do not depend on it
        version = str(profile.spec["engine_version"])
        c = all_contracts.get(engine, {}).get(version)
        if c is None:
            rows.append(Row(f"{engine} {version}", "persona", "HTTP contract", "present", "none", False))
            continue
        argv = _persona_argv(lab_root, profile, engine, version)
        rows += _check_persona(engine, c, argv, known, f"persona ({names[0]})")
    return rows


def known(r: Row) -> str | None:
    return None if r.ok else KNOWN.get((r.engine.split()[0], r.check))


def verdict(r: Row) -> str:
    return "MATCH" if r.ok else ("KNOWN" if known(r) else "MISMATCH")


def table(rows: list[Row]) -> str:
    head = ("engine", "subject", "check", "contract", "found", "result")
    cells = [(r.engine, r.subject, r.check, r.expected, r.found, verdict(r)) for r in rows]
    widths = [min(60, max(len(x[k]) for x in [head, *cells])) for k in range(6)]
    lines = ["  ".join(h.ljust(widths[k]) for k, h in enumerate(head))]
    lines += ["  ".join(x[k][:200].ljust(widths[k]) for k in range(6)) for x in cells]
    lines += [
        f"  KNOWN {line}" for line in dict.fromkeys(f"{r.engine} {r.check}: {known(r)}" for r in rows if known(r))
    ]
    return "\n".join(lines)


def main() -> int:
    rows = check_engine_files() + check_personas()
    print(table(rows))
    bad = sum(verdict(r) == "MISMATCH" for r in rows)
    print(f"{len(rows)} HTTP checks, {bad} mismatch(es)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
