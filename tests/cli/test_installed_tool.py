"""labctl as a user installs it: a wheel built from this checkout, installed into a fresh venv outside it (pip's
cache keeps that quick; the venv is shared by this module's tests), run from folders that are not the checkout,
with settings and data folders of its own. The wheel carries the lab; `labctl init` makes one and records it;
the harness engine starts and stops from the installed tool, its image built from the shipped Dockerfile when
it is missing (pushed to the lab registry when that answers, recorded with the registry's digest; otherwise run
by id, recorded without one); and nothing is ever written into the lab inside the wheel."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.harness_proc import free_port_in
from helpers.installed_tool import built
from helpers.lifecycle_helpers import remove_runs
from helpers.support import REPO, Result

# One tier for the whole module, so that its tests share one wheel and venv: docker (two of them start engines).
pytestmark = pytest.mark.docker
TEST_TAG = "installed-tool-test"  # never harness:dev, which other tests on this daemon share
PORTS = range(42000, 42100)


@dataclass(frozen=True)
class Installed:
    labctl: Path  # the command pipx put on the PATH
    shipped: Path  # the lab inside the installed wheel
    python: Path  # the venv pipx made for the distribution
    wheel: Path


@pytest.fixture(scope="module")
def installed() -> Installed:
    """The wheel and venv helpers.installed_tool started building when collection found this module."""
    made = built()
    root, venv = made.root, made.venv
    python = venv / "bin" / "python"
    where = subprocess.run(
        [str(python), "-c", "import labctl, pathlib; print(pathlib.Path(labctl.__file__).parent)"],
        capture_output=True,
        text=True,
        cwd=root,
        env=clean_env(root),
        check=True,
    ).stdout.strip()
    package = Path(where)
    assert package.is_relative_to(venv) and not package.is_relative_to(REPO), package
    return Installed(made.command, package / "_lab", python, made.wheel)


def clean_env(root: Path) -> dict[str, str]:
    """A user's environment: no lab or home named, settings and data folders of this test's own."""
    named = ("LABCTL_LAB", "LABCTL_HOME", "LABCTL_HOSTS", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in named}
    return {**env, "XDG_CONFIG_HOME": str(root / "config"), "XDG_DATA_HOME": str(root / "data")}


def run(tool: Installed, cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 180) -> Result:
    proc = subprocess.run(
        [str(tool.labctl), *args], capture_output=True, text=True, cwd=cwd, env=env or clean_env(cwd), timeout=timeout
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


@pytest.fixture
def untouched(installed: Installed) -> object:
    before = snapshot(installed.shipped)
    yield None
    assert snapshot(installed.shipped) == before, "the lab inside the wheel was written"


def free_port() -> int:
    """One labctl can bind (nothing listening is not enough: a client's own socket may hold the port)."""
    return free_port_in(PORTS.start, PORTS.stop - 1)


def test_pipx_installs_the_distribution_llm_labctl_whose_command_is_labctl(
    installed: Installed, tmp_path: Path
) -> None:
    """The name on PyPI is llm-labctl (labctl is an unrelated tool there); the command and the import stay labctl."""
    assert installed.wheel.name == "llm_labctl-0.1.0-py3-none-any.whl"
    version = run(installed, tmp_path, "--version")
    assert (version.code, version.stdout) == (0, "labctl 0.1.0\n"), version
    meta = subprocess.run(
        [
            str(installed.python),
            "-c",
            "import json, importlib.metadata as m; d = m.distribution('llm-labctl'); "
            "print(json.dumps({'name': d.metadata['Name'], 'version': d.version, 'license': d.metadata['License-Expression'], "
            "'scripts': [e.value for e in d.entry_points if e.group == 'console_scripts'], "
            "'files': [str(f) for f in d.files if 'licenses' in str(f)]}))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the checkout, whose egg-info the current folder would put first
        env=clean_env(tmp_path),
        check=True,
    )
    assert json.loads(meta.stdout) == {
        "name": "llm-labctl",
        "version": "0.1.0",
        "license": "MIT",
        "scripts": ["labctl.cli:main"],
        "files": ["llm_labctl-0.1.0.dist-info/licenses/LICENSE"],
    }


def test_the_wheel_carries_the_lab(installed: Installed, untouched: object) -> None:
    shipped = installed.shipped
    for rel in (
        "engines/harness/Dockerfile",
        "engines/harness/profiles/smoke.yaml",
        "engines/harness/persona/bin/vllm",
        "engines/vllm/cli/0.34.0.yaml",
        "templates/compose.yaml.j2",
        "workloads/data/sharegpt-sample.json",
        "suites/coding/suite.yaml",
        "studies/harness-demo.yaml",
    ):
        assert (shipped / rel).is_file(), rel
    assert sorted(p.name for p in shipped.iterdir()) == ["engines", "studies", "suites", "templates", "workloads"]
    schemas = sorted(p.name for p in (shipped.parent / "schemas").iterdir())  # for editors: labctl schema
    assert schemas == [f"{k}.schema.json" for k in ("hosts", "profile", "study", "suite", "workload")]


def test_init_validate_profiles_from_anywhere(installed: Installed, tmp_path: Path, untouched: object) -> None:
    env = clean_env(tmp_path)
    before = run(installed, tmp_path, "profiles", env=env)  # nothing around: the shipped lab, read-only
    assert before.code == 0 and re.search(r"\nharness +smoke ", before.stdout), before
    made = run(installed, tmp_path, "init", "lab", env=env)
    assert made.code == 0, made
    assert f"recorded {tmp_path / 'lab'} as your default lab" in made.stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "lab" / "engines" / "atlas" / "profiles" / "qwen3.6-35b-a3b-fp8.yaml").unlink()
    checked = run(installed, elsewhere, "validate", env=env)  # the default lab, not the shipped one
    assert checked.code == 0 and checked.stdout.endswith("ok: 11 profile(s) valid\n"), checked
    listed = run(installed, elsewhere, "profiles", "--json", env=env)
    assert listed.code == 0 and "atlas" not in {row["engine"] for row in json.loads(listed.stdout)}, listed
    refused = run(installed, tmp_path / "lab" / "engines", "init", env=env)
    assert refused.code == 2 and refused.stderr.count("\n") == 1 and "is not empty" in refused.stderr, refused


def up_and_down(installed: Installed, cwd: Path, env: dict[str, str], *home: str) -> dict:
    """`labctl up harness --profile smoke` on a free port, then `labctl down`; returns the record."""
    port = str(free_port())
    started = run(
        installed,
        cwd,
        *home,
        "up",
        "harness",
        "--profile",
        "smoke",
        "--allow-unpinned",
        "--port",
        port,
        "--json",
        env=env,
    )
    assert started.code == 0, started
    summary = json.loads(started.stdout.strip().splitlines()[-1])
    record = json.loads(Path(summary["record"]).read_text())
    with urllib.request.urlopen(f"{summary['base_url']}/models", timeout=10) as answer:
        assert json.load(answer)["data"][0]["id"] == "harness-smoke"
    stopped = run(installed, cwd, *home, "down", summary["run_id"], env=env)
    assert stopped.code == 0, stopped
    return {**record, "stderr": started.stderr}


def test_up_and_down_on_the_shipped_lab(
    installed: Installed, tmp_path: Path, docker_engine: None, untouched: object
) -> None:
    env = clean_env(tmp_path)
    data = tmp_path / "data" / "labctl"
    try:
        record = up_and_down(installed, tmp_path, env)
        assert record["record_path"].startswith(f"{data}/runs/"), record["record_path"]
        assert (data / "runs" / record["run_id"] / "compose.yaml").is_file()
        assert json.loads((data / "runs" / record["run_id"] / "record.json").read_text())["status"] == "stopped"
    finally:
        remove_runs(data)


def retag_smoke(lab: Path, image: str) -> None:
    path = lab / "engines" / "harness" / "profiles" / "smoke.yaml"
    path.write_text(re.sub(r"(?m)^image: .*$", f"image: {image}", path.read_text()))


def registry_digest(repository: str, tag: str) -> str:
    accept = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
    request = urllib.request.Request(
        f"http://127.0.0.1:5000/v2/{repository}/manifests/{tag}", method="HEAD", headers={"Accept": accept}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.headers["Docker-Content-Digest"])


def test_the_harness_image_is_built_when_missing(
    installed: Installed, tmp_path: Path, docker_engine: None, untouched: object
) -> None:
    env, home = clean_env(tmp_path), tmp_path / "home"
    assert run(installed, tmp_path, "init", "lab", env=env).code == 0
    lab = tmp_path / "lab"
    pushed = f"127.0.0.1:5000/labctl/harness:{TEST_TAG}"
    unreachable = f"127.0.0.1:{PORTS[-1]}/labctl/harness:{TEST_TAG}"  # no registry answers there
    try:
        for image in (pushed, unreachable):
            subprocess.run(["docker", "rmi", image], capture_output=True)
            retag_smoke(lab, image)
            record = up_and_down(installed, lab, env, "--home", str(home))
            steps = [line for line in record["stderr"].splitlines() if line.startswith(f"building {image}: Step ")]
            assert steps and steps[0].startswith(f"building {image}: Step 1/"), record["stderr"]
            built = record["image"]["built"]
            assert built.startswith(f"built by labctl 0.1.0 from {lab}/engines/harness/Dockerfile on "), built
            assert record["image"]["pulled"] is False and record["image"]["image_id"].startswith("sha256:")
            assert record["prep"]["image_pull"]["cached"] is False and record["prep"]["image_pull"]["detail"] == built
            if image == pushed:
                digest = registry_digest("labctl/harness", TEST_TAG)
                assert built.endswith(f"pushed to http://127.0.0.1:5000 as {digest}"), built
                assert record["image"]["digest"] == digest
            else:
                assert built.endswith(
                    "not pushed (no lab registry answers for it): run by image id, no registry digest"
                )
                assert record["image"]["digest"] is None  # the same image may have digests in other repositories
                assert not [d for d in record["image"]["repo_digests"] if d.startswith(f"127.0.0.1:{PORTS[-1]}/")]
        again = up_and_down(installed, lab, env, "--home", str(home))  # present now: nothing is built
        assert "building" not in again["stderr"] and again["prep"]["image_pull"]["cached"] is True
    finally:
        remove_runs(home)
        subprocess.run(["docker", "rmi", pushed, unreachable], capture_output=True)
