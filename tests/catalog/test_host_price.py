"""A host's GPU-hour price, set by the lab in its hosts file, is what bench results price their tokens at."""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.catalog.hosts_file import load_hosts


def test_the_price_is_read_per_host_and_absent_where_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        "hosts:\n  h100-a:\n    docker: ssh://lab@h100-a\n    gpu_hour_price: 2.49\n"
        "  spark:\n    docker: ssh://lab@spark\ndefault: h100-a\n"
    )
    monkeypatch.setenv("LABCTL_HOSTS", str(hosts))
    found = load_hosts(tmp_path / "lab")
    assert found.entries["h100-a"].gpu_hour_price == 2.49
    assert found.entries["spark"].gpu_hour_price is None
