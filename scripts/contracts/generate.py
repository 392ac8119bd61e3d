"""`make contracts [ENGINE=vllm|sglang VERSION=x.y.z]`: write engines/<engine>/cli/<version>.yaml
from the engine's own argparse parser, built from the exact PyPI wheel in a cached venv, and
engines/<engine>/http/<version>.yaml from the same wheel's server source (http_surface.py, read statically).

Which engines, versions and packages: each engine folder's engine.yaml `contract.generate`. An engine
without one (TensorRT-LLM, Atlas; see README.md in this folder) has contracts read from public source,
committed as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import http_surface  # noqa: E402
import venvs  # noqa: E402

from labctl.catalog.engines import list_engine_names, load_engine  # noqa: E402
from labctl.catalog.lab import Lab  # noqa: E402


class _NoAliases(yaml.SafeDumper):
    """labctl refuses anchors and aliases in every file it reads: write repeated values out in full."""

    def ignore_aliases(self, data: object) -> bool:
        return True


FIXTURES = {("vllm", "0.11.0"): ROOT / "tests/fixtures/contracts/vllm-0.11.0.yaml"}  # test fixtures, not engine data


@dataclass(frozen=True)
class Source:
    """How one engine's contracts are read, as its folder says (engine.yaml contract.generate)."""

    engine: str
    package: str
    parser: str  # whose argparse parser argparse_contract.py dumps
    versions: tuple[str, ...]
    speaker: str | None
    image: str | None  # read inside this image (which holds the wheel) instead of a venv


def sources() -> dict[str, Source]:
    """Every engine of the lab whose folder says how `make contracts` reads it."""
    lab = Lab(ROOT)
    found = {}
    for name in list_engine_names(lab):
        contract = load_engine(lab, name).spec["contract"] or {}
        gen = contract.get("generate")
        if gen:
            env = f"LABCTL_{name.upper().replace('-', '_')}_IMAGE"
            image = os.environ.get(env, gen["image"]) if gen["image"] else None
            found[name] = Source(
                name, gen["package"], gen["parser"], tuple(gen["versions"]), contract.get("speaker"), image
            )
    return found


def dump_in_image(source: Source, version: str, out: Path) -> tuple[str, str]:
    """Dump the parser inside the engine's image (no network); return the wheel's name and sha256 as its
    engine.yaml's provenance records them."""
    engine, parser, image = source.engine, source.parser, source.image
    assert image is not None
    provenance = yaml.safe_load((ROOT / "engines" / engine / "engine.yaml").read_text())["provenance"]
    if provenance["version"] != version:
        raise SystemExit(f"{engine}: engine.yaml packages {provenance['version']}, not {version}")
    found = subprocess.run(["docker", "image", "inspect", image], capture_output=True)
    if found.returncode != 0:
        raise SystemExit(f"{engine}: image {image} not found; build it with `make {engine}-image`")
    subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{HERE}:/contracts:ro", "-v", f"{out.parent}:/out"]
        + [
            "--entrypoint",
            "python",
            image,
            "/contracts/argparse_contract.py",
            "dump",
            parser,
            "--out",
            "/out/dump.json",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return str(provenance["wheel"]), str(provenance["wheel_sha256"])


def generate(source: Source, version: str, out: Path | None) -> Path:
    engine = source.engine
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump.json"
        if source.image is not None:
            wheel, wheel_sha256 = dump_in_image(source, version, dump)
        else:
            py, whl = venvs.ensure(source.package, version)
            wheel, wheel_sha256 = whl.name, venvs.sha256(whl)
            subprocess.run(
                [str(py), str(HERE / "argparse_contract.py"), "dump", source.parser, "--out", str(dump)],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        commands = json.loads(dump.read_text())
    target = out or ROOT / "engines" / engine / "cli" / f"{version}.yaml"
    doc: dict[str, object] = {"schema": 1, "engine": engine}
    if source.speaker:
        doc["speaker"] = source.speaker
    doc |= {
        "version": version,
        "provenance": {
            "kind": "pypi-wheel",
            "package": source.package,
            "version": version,
            "wheel": wheel,
            "wheel_sha256": wheel_sha256,
            "extracted_with": "scripts/contracts/argparse_contract.py",
            "regenerate": f"make contracts ENGINE={engine} VERSION={version}",
        },
        "commands": commands,
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    head = (
        f"# Generated by `make contracts ENGINE={engine} VERSION={version}` from the engine's own\n"
        f"# argparse parser (wheel {wheel}). Do not edit by hand.\n"
    )
    target.write_text(head + yaml.dump(doc, Dumper=_NoAliases, sort_keys=False, width=100, allow_unicode=True))
    return target


def generate_http(source: Source, version: str) -> Path:
    """The HTTP-surface contract, from the wheel the CLI contract was read from (a wheel read inside an image
    is fetched by name and checked against the sha256 its engine.yaml records)."""
    engine = source.engine
    whl = venvs.wheel_path(source.package, version)
    digest = venvs.sha256(whl)
    if source.image is not None:
        provenance = yaml.safe_load((ROOT / "engines" / engine / "engine.yaml").read_text())["provenance"]
        if (whl.name, digest) != (provenance["wheel"], provenance["wheel_sha256"]):
            raise SystemExit(f"{engine}: {whl.name} ({digest}) is not the wheel engine.yaml pins")
    target = ROOT / "engines" / engine / "http" / f"{version}.yaml"
    return http_surface.write(engine, version, source.package, whl, digest, target)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--engine")
    ap.add_argument("--version")
    a = ap.parse_args()
    known = sources()
    default = [(known[e], v, None) for e in known for v in known[e].versions]
    default += [(known[e], v, out) for (e, v), out in FIXTURES.items()]
    if a.engine or a.version:
        if not (a.engine and a.version):
            raise SystemExit("give both ENGINE and VERSION")
        if a.engine not in known:
            raise SystemExit(
                f"{a.engine}: its engine.yaml says no contract.generate: its contracts come from public source, "
                f"read by hand (see scripts/contracts/README.md); generated here: {', '.join(known)}"
            )
        todo = [(s, v, o) for s, v, o in default if (s.engine, v) == (a.engine, a.version)]
        todo = todo or [(known[a.engine], a.version, None)]
    else:
        todo = default
    for source, version, out in todo:
        print(f"{source.engine} {version}: {generate(source, version, out).relative_to(ROOT)}")
        if out is None:  # test fixtures (vLLM 0.11.0) get no HTTP contract
            print(f"{source.engine} {version}: {generate_http(source, version).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
