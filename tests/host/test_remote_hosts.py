"""Pure parts of the remote hosts: which hosts are known and listed, and the on-host claim's labels."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from labctl.catalog.hosts_file import load_hosts
from labctl.errors import BadInput
from labctl.host.gpus.claims import Claim, gpu_claim_name, port_claim_name


def write_hosts(path: Path, hosts: dict[str, dict[str, object]], default: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, object] = {"hosts": hosts}
    if default:
        doc["default"] = default
    path.write_text(yaml.safe_dump(doc))


@pytest.fixture(autouse=True)
def no_user_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABCTL_HOSTS", str(tmp_path / "user-hosts.yaml"))


def test_a_test_labs_host_is_known_by_name_but_not_listed(tmp_path: Path) -> None:
    write_hosts(tmp_path / "hosts.yaml", {"gpu-a": {"docker": "ssh://lab@10.0.0.5"}})
    write_hosts(
        tmp_path / "build" / "remote-lab" / "hosts.yaml", {"labb": {"docker": "ssh://labctl-remote@10.201.0.2"}}
    )
    hosts = load_hosts(tmp_path)
    assert hosts.get("labb").docker == "ssh://labctl-remote@10.201.0.2" and hosts.get("labb").is_remote
    assert [e.name for e in hosts.listed()] == ["local", "gpu-a"]
    with pytest.raises(BadInput, match="known hosts are gpu-a, labb, local"):
        hosts.get("nope")


def test_the_default_host_is_listed_first_and_local_always(tmp_path: Path) -> None:
    write_hosts(tmp_path / "hosts.yaml", {"b": {"docker": "local"}, "a": {"docker": "unix:///x.sock"}}, default="b")
    assert [e.name for e in load_hosts(tmp_path).listed()] == ["b", "a", "local"]


def test_ssh_argv_uses_dockers_own_account_address_and_port() -> None:
    from labctl.catalog.hosts_file import HostEntry

    entry = HostEntry("h", "ssh://lab@10.0.0.5:2222", ("nvidia-smi", "-L"))
    assert entry.ssh_argv() == ["ssh", "-o", "BatchMode=yes", "-p", "2222", "lab@10.0.0.5"]
    assert entry.nvidia_smi_argv()[-3:] == ["--", "nvidia-smi", "-L"]


def test_a_claim_survives_its_labels_and_names_are_docker_safe() -> None:
    claim = Claim(
        name=gpu_claim_name("GPU-5a1b0000-0000-4000-8000-0000000000b1"),
        what="GPU 0 (GPU-5a1b…)",
        run_id="20261203-120000-abcdef",
        owner="alice",
        controller="laptop-a",
        home="/home/alice/lab",
        up_process="123:456",
        claimed_at="2026-12-03T12:00:00.000Z",
        deadline=1_800_000_000.0,
    )
    back = Claim.from_labels(claim.name, "c0ffee", claim.labels())
    assert back == Claim(**{**claim.__dict__, "container_id": "c0ffee"})
    assert claim.name == "labctl-gpu-GPU-5a1b0000-0000-4000-8000-0000000000b1"
    assert gpu_claim_name("a/b c$d") == "labctl-gpu-a_b_c_d" and port_claim_name(18000) == "labctl-port-18000"
    assert "laptop-a" in back.describe() and "alice" in back.describe()


def test_a_claim_with_a_malformed_deadline_counts_as_expired() -> None:
    labels = {"labctl.claim.run_id": "20261203-120000-abcdef", "labctl.claim.deadline": "soon"}
    assert Claim.from_labels("labctl-port-1", "x", labels).deadline == 0.0


@pytest.mark.process
def test_closing_a_forward_kills_an_ssh_that_ignores_sigterm(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ssh blocked on a stalled peer leaves SIGTERM pending: the forward must still be gone after close."""
    import subprocess

    from labctl.host.identity import process_alive, process_token
    from labctl.host.remote import forward as fw

    monkeypatch.setattr(fw, "CLOSE_GRACE_S", 0.5)

    # bash named "ssh" with -L in its argv, as /proc shows labctl's forwards; SIGTERM ignored
    script = "trap '' TERM; echo ready; while :; do sleep 0.2; done"
    argv = ["ssh", "-c", script, "-N", "-L", "127.0.0.1:1:127.0.0.1:2"]
    proc = subprocess.Popen(argv, executable="/bin/bash", stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        token = process_token(proc.pid)
        forward = fw.Forward(local_port=1, remote="127.0.0.1:2", process=token)
        assert forward.alive, "the stand-in must look like labctl's ssh forward"
        assert fw.close_forward(forward) is True
        proc.wait(timeout=5)
        assert not process_alive(token)
    finally:
        proc.kill()
        proc.wait()


def test_remote_listeners_are_read_from_the_kernels_tables() -> None:
    from labctl.host.remote.ports import holds, parse_tables

    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0200C90A:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
        "   1: 0100007F:1388 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1\n"
        "   2: 0100007F:A1B2 0100007F:1388 01 00000000:00000000 00:00000000 00000000     0        0 3 1\n"
        "   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 0 0 0 0 0 4 1\n"
        "   1: 0000000000000000FFFF00000100007F:2328 00000000000000000000000000000000:0000 0A 0 0 0 0 0 5 1\n"
    )
    found = parse_tables(table)
    assert found == {("10.201.0.2", 22), ("127.0.0.1", 5000), ("::", 8080), ("127.0.0.1", 9000)}
    assert holds(found, "127.0.0.1", 5000) == "127.0.0.1:5000"
    assert holds(found, "127.0.0.1", 8080) == "[::]:8080"  # a wildcard listener takes every address
    assert holds(found, "0.0.0.0", 22) == "10.201.0.2:22"
    assert holds(found, "127.0.0.1", 22) is None and holds(found, "127.0.0.1", 41394) is None  # 0xA1B2: not listening
