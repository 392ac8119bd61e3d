"""The tests' side of the loopback Hub (labctl/host/hub/loopback.py): the stand-in repositories in
tests/fixtures/hub/ORG/NAME/ (real config.json numbers, a tokenizer, no weights) and the token their gated
repositories accept."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from labctl.host.hub import loopback as served
from labctl.host.hub.loopback import HubRepo, Served, blob_id, repo_from_folder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hub"
GRANTED_TOKEN = "hf_labctl_test_granted_0123456789"

__all__ = [
    "FIXTURES",
    "GRANTED_TOKEN",
    "HubRepo",
    "LoopbackHub",
    "Served",
    "blob_id",
    "loopback_hub",
    "repo_from_folder",
]


def fixture_repos() -> dict[str, HubRepo]:
    return served.repos_in(FIXTURES)


class LoopbackHub(served.LoopbackHub):
    def __init__(self, repos: dict[str, HubRepo] | None = None, rate: float | None = None) -> None:
        super().__init__(repos if repos is not None else fixture_repos(), rate, granted_token=GRANTED_TOKEN)


@contextmanager
def loopback_hub(repos: dict[str, HubRepo] | None = None, rate: float | None = None) -> Iterator[LoopbackHub]:
    with LoopbackHub(repos, rate) as hub:
        yield hub
