"""Slurm clusters in the hosts file: how labctl reaches a cluster's commands (the local `SLURM_CONF`, or a
login host over SSH), where its jobs go (partition, account, QoS, default time limit), and how engines run
on its nodes (each node's own Docker Engine, reached like any host). labctl never picks a node or a GPU:
Slurm does; this file only says how to reach what Slurm chose.

    clusters:
      lab-a:
        slurm_conf: /etc/slurm/slurm.conf      # or login: ssh://user@login-node[:port]
        partition: gpu
        account: lab
        qos: normal
        time: 30                              # minutes, when neither the profile nor --time says
        nodes:
          n1: {docker: unix:///var/run/docker.sock}
          n2: {docker: ssh://lab@10.0.0.7, socket: /var/run/docker.sock}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from labctl.catalog.fields import Field, check_mapping
from labctl.catalog.hosts_file import (
    FILE_FIELDS,
    HOST_FIELDS,
    HOST_NAME,
    TEST_LAB_HOSTS,
    HostEntry,
    is_endpoint,
    load_hosts,
    user_hosts_file,
)
from labctl.catalog.sourcefile import load_yaml_mapping
from labctl.errors import BadInput

_SLURM_WORD = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
_PATH = re.compile(r"/[A-Za-z0-9._/-]{1,200}\Z")

CLUSTER_FIELDS = {
    "slurm_conf": Field("str", "the cluster's slurm.conf on this machine", check=lambda v: _PATH.match(v) is not None),
    "login": Field(
        "str",
        "ssh://user@login-host[:port], where Slurm's commands run",
        check=lambda v: v.startswith("ssh://") and is_endpoint(v),
    ),
    "partition": Field("str", "a Slurm partition name", check=lambda v: _SLURM_WORD.match(v) is not None),
    "account": Field("str", "a Slurm account name", check=lambda v: _SLURM_WORD.match(v) is not None),
    "qos": Field("str", "a Slurm QoS name", check=lambda v: _SLURM_WORD.match(v) is not None),
    "time": Field("int", "the default time limit in whole minutes (1-10080)", check=lambda v: 0 < v <= 10080),
    "simulated": Field("bool", default=False),
    "nodes": Field("map", "node name to how its Docker Engine is reached", item=Field("map", "a node entry")),
}


@dataclass(frozen=True)
class ClusterEntry:
    name: str
    slurm_conf: str | None = None
    login: str | None = None  # ssh://user@host[:port]
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_minutes: int = 30
    simulated: bool = False  # a test bed: its GPUs are simulated, never real-gpu
    nodes: dict[str, HostEntry] = field(default_factory=dict)

    def command_argv(self, argv: list[str]) -> list[str]:
        """Slurm's command as labctl runs it: here with SLURM_CONF, or on the login host over SSH."""
        conf = [f"SLURM_CONF={self.slurm_conf}"] if self.slurm_conf else []
        if self.login is None:
            return ["env", *conf, *argv]
        login = HostEntry(f"{self.name}-login", self.login)
        return [*login.ssh_argv(), "--", "env", *conf, *argv]

    def node(self, name: str) -> HostEntry:
        """The Docker host behind a node Slurm chose."""
        if name not in self.nodes:
            known = ", ".join(sorted(self.nodes)) or "none"
            raise BadInput(
                f"cluster {self.name}: Slurm ran the job on node {name!r}, which the hosts file does not describe "
                f"(nodes: {known}); add it under clusters.{self.name}.nodes."
            )
        return self.nodes[name]


NODE_FIELDS = {key: HOST_FIELDS[key] for key in ("docker", "nvidia_smi", "socket")}


def load_clusters(lab_root: Path, test_labs: bool = True) -> dict[str, ClusterEntry]:
    """The clusters the hosts files name: the lab's and the user's (which wins); with `test_labs`, also the
    Slurm test lab's registration (known by name, not listed, like a test lab's host)."""
    found: dict[str, ClusterEntry] = {}
    extra = [lab_root / r for r in TEST_LAB_HOSTS] if test_labs else []
    for path in (*extra, lab_root / "hosts.yaml", user_hosts_file()):
        found.update(_read_clusters(path))
    return found


def get_cluster(lab_root: Path, name: str) -> ClusterEntry | None:
    return load_clusters(lab_root).get(name)


def run_host(lab_root: Path, host_entry: str) -> HostEntry:
    """The host a record names: a configured host, or a cluster's node (`CLUSTER/NODE`) Slurm chose."""
    cluster_name, _, node = host_entry.partition("/")
    cluster = get_cluster(lab_root, cluster_name) if node else None
    if cluster is not None and node in cluster.nodes:
        return cluster.node(node)
    return load_hosts(lab_root).get(host_entry)


def _read_clusters(path: Path) -> dict[str, ClusterEntry]:
    if not path.is_file():
        return {}
    src = load_yaml_mapping(path, display=str(path))
    spec = check_mapping(src, (), src.data, FILE_FIELDS)
    clusters = {}
    for name, raw in (spec["clusters"] or {}).items():
        if not isinstance(name, str) or not HOST_NAME.match(name):
            raise src.problem(
                ("clusters",), f"cluster name {name!r} is not allowed: lower-case letters, digits, '.', '_', '-'."
            )
        entry = check_mapping(src, ("clusters", name), raw, CLUSTER_FIELDS)
        if entry["slurm_conf"] and entry["login"]:
            raise src.problem(
                ("clusters", name), "give slurm_conf or login, not both: how Slurm's commands are reached."
            )
        nodes = {}
        for node, node_raw in (entry["nodes"] or {}).items():
            if not isinstance(node, str) or not _SLURM_WORD.match(node):
                raise src.problem(("clusters", name, "nodes"), f"node name {node!r} is not a Slurm node name.")
            n = check_mapping(src, ("clusters", name, "nodes", node), node_raw, NODE_FIELDS)
            nodes[node] = HostEntry(
                f"{name}/{node}",
                n["docker"],
                tuple(n["nvidia_smi"] or ("nvidia-smi",)),
                bool(entry["simulated"]),
                None,
                n["socket"] or "/var/run/docker.sock",
            )
        clusters[name] = ClusterEntry(
            name,
            entry["slurm_conf"],
            entry["login"],
            entry["partition"],
            entry["account"],
            entry["qos"],
            entry["time"] or 30,
            bool(entry["simulated"]),
            nodes,
        )
    return clusters
