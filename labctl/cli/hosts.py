"""hosts: the Docker hosts this lab drives, with their GPUs."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from labctl.cli.context import listing, out, state


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        no_args_is_help=False,
        invoke_without_command=True,
        help="The Docker hosts this lab drives (local, simulated, or ssh://) and their GPUs, and its Slurm clusters.\n\nExample: labctl hosts",
    )
    group.callback()(hosts)
    group.command("add")(add)
    group.command("remove")(remove)
    app.add_typer(group, name="hosts")


def hosts(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the hosts with their Docker endpoint, reachability, Docker version and GPUs; then the Slurm clusters
    with their partition, nodes, GPUs and free GPUs (read from Slurm).

    Example: labctl hosts --json
    """
    if ctx.invoked_subcommand is not None:
        return
    from labctl.run.lifecycle.cluster_nodes import describe_clusters
    from labctl.run.lifecycle.host_inventory import describe_hosts

    rows = describe_hosts(state.lab())
    clusters = describe_clusters(state.lab())
    if as_json:
        print(json.dumps(rows + [{"kind": "cluster", **c} for c in clusters]))
        return
    listing(
        [[r["name"], r["docker"], r["reachable"], r["docker_version"] or "-", r["gpus_text"]] for r in rows],
        ["HOST", "DOCKER", "REACHABLE", "DOCKER VERSION", "GPUS"],
        False,
    )
    if clusters:
        out("")
        listing(
            [
                [
                    c["name"],
                    c["slurm"],
                    c["partition"],
                    c["reachable"],
                    str(c["gpus"]),
                    str(c["gpus_free"]),
                    c["nodes_text"],
                ]
                for c in clusters
            ],
            ["CLUSTER", "SLURM", "PARTITION", "REACHABLE", "GPUS", "FREE GPUS", "NODES"],
            False,
        )


def add(
    name: Annotated[str, typer.Argument(help="A short name, e.g. h100-a.")],
    docker: Annotated[str, typer.Argument(help="local, unix:///path/docker.sock or ssh://user@host[:port].")],
    nvidia_smi: Annotated[str, typer.Option(help="The nvidia-smi command on that host.")] = "nvidia-smi",
    socket: Annotated[
        str | None,
        typer.Option(help="The Docker daemon's socket as that host sees it (default /var/run/docker.sock)."),
    ] = None,
) -> None:
    """Add (or replace) a host in your hosts file (~/.config/labctl/hosts.yaml or $LABCTL_HOSTS).

    Example: labctl hosts add h100-a ssh://lab@10.0.0.5
    """
    from labctl.host.remote.hosts import add_host

    path = add_host(name, docker, nvidia_smi.split(), socket)
    out(f"added host {name} ({docker}) to {path}")


def remove(name: Annotated[str, typer.Argument(help="The host to forget.")]) -> None:
    """Remove a host from your hosts file.

    Example: labctl hosts remove h100-a
    """
    from labctl.host.remote.hosts import remove_host

    out(f"removed host {name} from {remove_host(name)}")
