"""`labctl study` refusals as a person meets them: one line, exit 2, nothing written or started."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.support import run_labctl

pytestmark = pytest.mark.process

STUDY = {
    "study": "cli",
    "model": {"id": "labctl/harness-synthetic", "revision": "v1", "quantization": "none"},
    "workloads": [{"name": "chat-sweep", "concurrency": [1], "requests": 4}],
    "environment": "simulated",
    "allow_unpinned": True,
    "fetch": False,
    "profiles": [{"engine": "harness", "profile": "smoke"}, {"engine": "harness", "profile": "other-revision"}],
}


def test_bad_files_and_a_revision_mismatch_exit_2_before_anything_starts(tmp_path: Path, lab: Path) -> None:
    smoke = yaml.safe_load((lab / "engines/harness/profiles/smoke.yaml").read_text())
    smoke["model"]["revision"] = "v2"
    (lab / "engines/harness/profiles/other-revision.yaml").write_text(yaml.safe_dump(smoke))
    home = tmp_path / "home"
    env = {"LABCTL_HOME": str(home), "LABCTL_HOSTS": str(tmp_path / "no-hosts.yaml")}
    study = tmp_path / "cli.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    ran = run_labctl("study", "run", str(study), lab=lab, env=env)
    assert ran.code == 2, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "model.revision differs across cells" in lines[0]
    assert "v1: harness.smoke@local" in lines[0] and "v2: harness.other-revision@local" in lines[0]
    assert "Traceback" not in ran.stderr and ran.stdout == ""
    assert not home.exists()  # no run, no study state: refused before any up

    study.write_text("study: cli\nworkloads: [{name: chat-sweep}]\nprofiles: nope\n")
    bad = run_labctl("study", "plan", str(study), lab=lab, env=env)
    assert bad.code == 2
    assert bad.stderr.count("\n") == 1 and "cli.yaml:" in bad.stderr and "Traceback" not in bad.stderr
    missing = run_labctl("study", "status", "never-ran", lab=lab, env=env)
    assert missing.code == 2 and "no study 'never-ran'" in missing.stderr
    assert not home.exists()
