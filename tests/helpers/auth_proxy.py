"""The harness engine as an engine whose own key leaves a model-running route open: an HTTP contract in the
lab's copy of engines/harness/http/ saying so, which makes `up --resident` front it with labctl's proxy."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from helpers.support import IN_CI
from labctl.run.resident.lockdown import AUTH_PROXY_IMAGE

ROUTES = [
    {"path": "/v1/models", "methods": ["GET"], "key_guarded": True, "runs_model": False},
    {"path": "/v1/chat/completions", "methods": ["POST"], "key_guarded": True, "runs_model": True},
    {"path": "/health", "methods": ["GET"], "key_guarded": False, "runs_model": False},
    {"path": "/metrics", "methods": ["GET"], "key_guarded": False, "runs_model": False},
    {"path": "/version", "methods": ["GET"], "key_guarded": False, "runs_model": False},
]


def require_proxy_image() -> None:
    if subprocess.run(["docker", "image", "inspect", AUTH_PROXY_IMAGE], capture_output=True).returncode == 0:
        return
    if IN_CI:
        pytest.fail(f"CI=true and {AUTH_PROXY_IMAGE} is missing: CI must run `make auth-proxy-image`", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {AUTH_PROXY_IMAGE} is missing; run `make auth-proxy-image`")


def write_contract(lab: Path, open_chat: bool) -> None:
    """The harness's contract at version 1.0: /v1/chat/completions open without the key (or guarded)."""
    routes = [dict(r, key_guarded=False) if r["path"] == "/v1/chat/completions" and open_chat else r for r in ROUTES]
    folder = lab / "engines" / "harness" / "http"
    folder.mkdir(exist_ok=True)
    contract = {
        "schema": 1,
        "engine": "harness",
        "version": "1.0",
        "provenance": {
            "source": "github",
            "repo": "labctl/test",
            "commit": "a" * 40,
            "files": ["-"],
            "extracted_by": "hand",
        },
        "routes": routes,
        "key": {"mechanism": "--api-key", "guards": "/v1"},
        "metrics": {"route": "/metrics", "enabled_by": [], "names": []},
        "readiness": {"route": "/health", "means": "200 when ready"},
    }
    (folder / "1.0.yaml").write_text(yaml.safe_dump(contract))


def pin_contract_version(lab: Path, profile: str) -> None:
    path = lab / "engines" / "harness" / "profiles" / f"{profile}.yaml"
    path.write_text(path.read_text() + 'engine_version: "1.0"\n')
