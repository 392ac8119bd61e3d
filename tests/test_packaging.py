"""The distribution as it would be published: one version in three places, a license, a changelog entry."""

from __future__ import annotations

import re
import tomllib

from helpers.support import REPO

import labctl


def test_the_distribution_is_llm_labctl_with_one_version_its_license_and_a_changelog_entry() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == "llm-labctl"  # `labctl` on PyPI is an unrelated tool
    assert project["scripts"] == {"labctl": "labctl.cli:main"}
    assert project["version"] == labctl.__version__
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert (REPO / "LICENSE").read_text().startswith("MIT License\n")
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(labctl.__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.M)
    manifest = (REPO / "MANIFEST.in").read_text()
    assert "include LICENSE CHANGELOG.md" in manifest
