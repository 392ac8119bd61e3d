"""State shared by all commands: global options, the lab, and how to print."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from labctl.cli.terminal import inert, inert_value

CopyImage = Annotated[
    bool,
    typer.Option(
        "--copy-image",
        help="--host only: copy the pinned image from this machine's Docker (save | load over ssh://, "
        "checked on arrival) for a host that cannot reach its registry.",
    ),
]
HOST_HELP = "The Docker host to drive (see `labctl hosts`; default: the global --host, else the default host)."
SHARED_HELP = "Measure even while another bench or eval holds the engine (its lock); the result records the caveat."
WAIT_HELP = "Seconds to wait for another bench or eval on the same engine to finish (default: refuse at once, exit 3)."

if TYPE_CHECKING:
    from labctl.catalog.hosts_file import HostEntry
    from labctl.catalog.lab import Lab
    from labctl.run.backends.backend import Backend
    from labctl.run.records.store import Runs


@dataclass
class State:
    debug: bool = False
    lab_option: str | None = None
    home_option: str | None = None
    host_option: str | None = None
    skipped: int = 0  # bad entries a command reported and went past: it exits 1
    _lab: Lab | None = None
    _host: HostEntry | None = None

    def lab(self) -> Lab:
        """The lab folder; resolving it also chooses the host this command drives (--host, else the
        default of the hosts files)."""
        if self._lab is None:
            from labctl.catalog.hosts_file import load_hosts
            from labctl.catalog.lab import find_lab
            from labctl.host.remote.hosts import activate

            lab = find_lab(self.lab_option)
            if lab.packaged:  # read-only: what a command renders goes to the home, like its runs
                from labctl.run.records.store import home_dir

                lab = lab.rendering_into(home_dir(lab, self.home_option) / "compose")
            self._lab = lab
            # A cluster named by the global --host places runs itself (backend()): Docker questions go to the
            # default host meanwhile, as with a command's own --host CLUSTER.
            name = None if self.global_cluster() else self.host_option
            self._host = load_hosts(self._lab.root).get(name)
            activate(self._host)
        return self._lab

    def writable_lab(self, what: str) -> Lab:
        """The lab, refused when it is the read-only one that ships with labctl."""
        lab = self.lab()
        lab.check_writable(what)
        return lab

    def use_lab(self, root: Path) -> None:
        """From here on, the lab at `root` (as if --lab named it): its host is chosen again when next asked."""
        self.lab_option, self._lab, self._host = str(root), None, None

    def lab_root(self) -> Path:
        """The lab folder's root, found without choosing the host this command drives."""
        from labctl.catalog.lab import find_lab

        return self._lab.root if self._lab is not None else find_lab(self.lab_option).root

    def global_cluster(self) -> str | None:
        """The global --host when it names a cluster (whose backend then answers as for a command's own --host)."""
        if not self.host_option:
            return None  # most commands: no backend kinds imported at start-up
        from labctl.run.backends.kinds import claimed

        return self.host_option if claimed(self.lab_root(), self.host_option) is not None else None

    def backend(self, name: str | None) -> Backend:
        """What places a run for --host NAME: the backend another kind claims the name for (a Slurm cluster),
        else the Docker host this command drives (NAME, else the global --host, else the default host)."""
        from labctl.run.backends.docker.docker_host import DockerHost
        from labctl.run.backends.kinds import claimed

        found = claimed(self.lab_root(), name or self.host_option)
        if found is not None:
            return found
        self.choose_host(name)
        return DockerHost(self.host())

    def backend_of_run(self, run_id: str | None) -> Backend:
        """The backend a run's record names when another kind claims it (a Slurm job), else the Docker host
        the run is on (as follow_run chooses it)."""
        from labctl.run.backends.docker.docker_host import DockerHost
        from labctl.run.backends.kinds import claimed_run
        from labctl.run.records.store import is_run_id

        record = self.runs().try_load(run_id) if run_id and is_run_id(run_id) else None
        found = claimed_run(self.lab_root(), record) if record is not None else None
        if found is not None:
            return found
        self.follow_run(run_id)
        return DockerHost(self.host())

    def host(self) -> HostEntry:
        self.lab()
        assert self._host is not None
        return self._host

    def choose_host(self, name: str | None) -> None:
        """A command's own --host (the same as the global one, which it overrides)."""
        if name:
            if self._lab is not None and name != self.host_option:
                raise AssertionError("choose_host after the host was resolved")
            self.host_option = name

    def host_of_run(self, run_id: str | None) -> HostEntry:
        """The host a run's record names (without driving it): to reach the run, not to run Docker there."""
        from labctl.catalog.clusters_file import run_host
        from labctl.run.records.store import is_run_id

        record = self.runs().try_load(run_id) if run_id and is_run_id(run_id) else None
        if self.host_option or record is None:
            return self.host()
        return run_host(self.lab().root, record.host_entry)

    def follow_run(self, run_id: str | None) -> None:
        """A command about one run drives the host its record names, unless --host chose one."""
        from labctl.catalog.clusters_file import run_host
        from labctl.host.remote.hosts import activate
        from labctl.run.records.store import is_run_id

        if self.host_option or not run_id or not is_run_id(run_id):
            return
        record = self.runs().try_load(run_id)
        if record is not None and record.host_entry != self.host().name:
            self._host = run_host(self.lab().root, record.host_entry)
            activate(self._host)

    def runs(self) -> Runs:
        from labctl.run.records.store import Runs, home_dir

        return Runs(home_dir(self.lab(), self.home_option))

    def home_runs(self) -> Runs:
        """The home's runs, found without choosing the host this command drives (its --host is read later)."""
        from labctl.catalog.lab import find_lab
        from labctl.run.records.store import Runs, home_dir

        return Runs(home_dir(self._lab or find_lab(self.lab_option), self.home_option))


state = State()


def out(text: str = "") -> None:
    """Every line a command prints for people goes through here (or `warn`): values stay inert."""
    print(inert(text))


def warn(text: str) -> None:
    print(inert(text), file=sys.stderr)


def skip(text: str) -> None:
    """A bad entry (a record, a result, a workload file) on its own line; the command goes on with the
    rest and exits 1 at the end."""
    state.skipped += 1
    warn(text)


def table(rows: list[list[str]], header: list[str]) -> str:
    """A plain aligned text table (rich costs import time these commands do not need); each cell one line."""
    header, rows = [inert_value(str(c)) for c in header], [[inert_value(str(c)) for c in r] for r in rows]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in [header, *rows]]
    return "\n".join(lines)


def listing(rows: list[list[str]], header: list[str], as_json: bool, empty: str = "") -> None:
    """A table for people, or with --json one object per row keyed by the lower-cased column names."""
    if as_json:
        keys = [h.lower().replace("/", "_").replace("@", "_at_").replace(" ", "_") for h in header]
        print(json.dumps([dict(zip(keys, row, strict=True)) for row in rows]))
    elif rows or not empty:
        out(table(rows, header))
    else:
        out(empty)


class Thinking(StrEnum):
    on = "on"
    off = "off"


# Id arguments: any unique prefix or suffix of an id, or `latest` (run/records/ids.py), made whole before the
# command runs, so every command takes what `labctl runs`, `bench list` and `eval list` show, in part.
def run_id_arg(value: str | None) -> str | None:
    from labctl.run.records.ids import resolve

    return None if value is None else resolve(state.home_runs(), value, "run")


def bench_id_arg(value: str) -> str:
    from labctl.run.records.ids import resolve

    return resolve(state.home_runs(), value, "bench")


def eval_id_arg(value: str) -> str:
    from labctl.run.records.ids import resolve

    return resolve(state.home_runs(), value, "eval")


def result_ids_arg(values: list[str]) -> list[str]:
    """Bench ids or run ids (compare): each made whole."""
    from labctl.run.records.ids import resolve_bench_or_run

    runs = state.home_runs()
    return [resolve_bench_or_run(runs, value) for value in values]


def run_or_file_arg(value: str) -> str:
    """A run id (in part) or an export file: an existing file is taken as given."""
    return value if Path(value).exists() else str(run_id_arg(value))


def run_or_engine_arg(value: str | None) -> str | None:
    """A run id (in part) or an engine name: an engine of the lab is taken as given."""
    from labctl.errors import LabctlError

    try:
        simple = value is not None and value.replace("-", "").replace("_", "").isalnum()
        if simple and (state.lab_root() / "engines" / str(value) / "engine.yaml").is_file():
            return value
    except LabctlError:
        pass  # no lab here: only run ids can be meant
    return run_id_arg(value)


# Shell completion (`labctl --install-completion`): ids from the home, names from the lab. A completion must
# never fail or print: whatever cannot be read completes nothing.
def _quietly(find: Callable[[], list[str]], incomplete: str) -> list[str]:
    try:
        return [value for value in find() if value.startswith(incomplete)][:200]
    except Exception:  # noqa: BLE001 - a broken home or lab must not break the user's shell
        return []


def complete_run_id(incomplete: str) -> list[str]:
    return _quietly(lambda: [*reversed(state.home_runs().all_ids()), "latest"], incomplete)


def complete_engine(incomplete: str) -> list[str]:
    return _quietly(
        lambda: sorted(p.parent.name for p in (state.lab_root() / "engines").glob("*/engine.yaml")), incomplete
    )


def complete_host(incomplete: str) -> list[str]:
    """Hosts and clusters of the hosts files."""
    from labctl.catalog.clusters_file import load_clusters
    from labctl.catalog.hosts_file import LOCAL, load_hosts

    def names() -> list[str]:
        root = state.lab_root()
        return sorted({LOCAL, *load_hosts(root).entries, *load_clusters(root)})

    return _quietly(names, incomplete)


def complete_workload(incomplete: str) -> list[str]:
    return _quietly(lambda: sorted(p.stem for p in (state.lab_root() / "workloads").glob("*.yaml")), incomplete)


def complete_profile(ctx: typer.Context, incomplete: str) -> list[str]:
    """The profiles of the engine already on the command line (every engine's when none is)."""

    def names() -> list[str]:
        engine = ctx.params.get("engine")
        engines = state.lab_root() / "engines"
        folders = [engines / engine] if isinstance(engine, str) else [p.parent for p in engines.glob("*/engine.yaml")]
        return sorted({p.stem for folder in folders for p in (folder / "profiles").glob("*.yaml")})

    return _quietly(names, incomplete)


def run_argument(help: str, callback: Callable[..., Any] = run_id_arg) -> Any:
    """A run id argument: typed in part or as `latest` (made whole by `callback`), completed from the home."""
    return typer.Argument(callback=callback, autocompletion=complete_run_id, help=help)
