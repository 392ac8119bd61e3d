"""The restart watcher of one resident deployment: a standalone program (standard library only) that
`labctl up --resident` runs beside the engine, in a container `labctl-watch-<run_id>`. It is one file
that imports nothing from labctl, because it is copied into the run's folder and run there alone.

Why a sidecar container and not a labctl process: it must live exactly as long as the deployment,
whoever started it and whether or not anyone runs labctl again. Docker already keeps containers
alive for days and brings them back after a daemon restart (restart policy unless-stopped), so the
watcher gets the engine's own lifetime guarantees for free, and `docker ps` shows it. Docker is the
source of truth: the watcher follows the Engine API's event stream filtered to the run's containers
(`die` carries the exit code, `oom` the OOM kill, `start` the restart), so a restart is recorded
even when it happens between two of its own health probes. It talks to the API over the mounted
socket with http.client (the image needs only python3), runs as the invoking user with the socket's
group, and appends to the run's events.jsonl under the run's own lock file (the one labctl's
read-modify-writes take), de-duplicated by Docker's event time so that labctl's fallback replay of
the same events (`labctl status`) never counts a restart twice.

A daemon restart is seen from the socket: dockerd creates it at start, so its ctime is the daemon's
start time. The watcher keeps that time in watch-state.json; when Docker starts the watcher again
and the time moved, the daemon restarted and that is recorded. A lost event stream makes the
watcher exit non-zero, so Docker restarts it (with a fresh socket mount) once the daemon is back.

A hung engine (its process alive, its health probe failing) is something Docker never restarts by
itself: after the engine answered healthy once since its last start, `--failures` failed probes in
a row (each `--probe-timeout` long, `--interval` apart) make the watcher restart it through the API
and record a `hung-restart` with the reason. The watcher ends itself (removing its container) when
its run's serve container is gone or its record says the run ended.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fcntl
import http.client
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ENDED = ("stopped", "failed", "aborted", "stopping")  # stopping: a `labctl down` is taking it down
WATCH_ACTIONS = ("start", "die", "oom", "kill", "stop", "restart", "destroy")
OOM_WINDOW_NS = 5 * 10**9


# --- pure: Docker events -> restart entries (also used by labctl's fallback replay) -------------------
def restart_entries(events: list[dict[str, Any]], seen_by: str) -> list[dict[str, Any]]:
    """Each `die` of the serve container followed by its `start` is one restart, with the exit code,
    whether the kernel OOM-killed it, and whether someone stopped it through Docker first."""
    entries: list[dict[str, Any]] = []
    pending: dict[str, Any] = {}
    for event in events:
        attrs = (event.get("Actor") or {}).get("Attributes") or {}
        if event.get("Type") != "container" or attrs.get("com.docker.compose.service") != "serve":
            continue
        action = str(event.get("Action") or event.get("status") or "").split(":", 1)[0]
        nano = int(event.get("timeNano") or int(event.get("time") or 0) * 10**9)
        if action == "oom":  # any process of the container; it is the engine's when its die follows at once
            pending["oom_at"] = nano
        elif action == "kill" and "died_at" not in pending:  # stop, restart and rotate-key send one first
            signal = f", signal {attrs['signal']}" if attrs.get("signal") else ""
            pending["cause"] = (
                f"stopped through the Docker API ({action}{signal}: docker restart/stop/kill, rotate-key)"
            )
        elif action == "die":
            oom = nano - pending.get("oom_at", -(10**20)) < OOM_WINDOW_NS
            pending.update(exit_code=exit_code(attrs), died_at=iso(nano), oom_killed=oom)
        elif action == "start" and "died_at" in pending:
            entries.append(
                {
                    "at": iso(nano),
                    "event": "restart",
                    "by": "docker",
                    "seen_by": seen_by,
                    "exit_code": pending.get("exit_code"),
                    "oom_killed": pending.get("oom_killed", False),
                    "cause": pending.get("cause", "the engine exited; Docker's restart policy started it again")
                    if not pending.get("oom_killed")
                    else "the kernel's OOM killer ended the engine; Docker's restart policy started it again",
                    "died_at": pending["died_at"],
                    "docker_time_nano": nano,
                }
            )
            pending = {}
        elif action == "start":
            pending = {}
    return entries


def exit_code(attrs: dict[str, Any]) -> int | None:
    code = str(attrs.get("exitCode", ""))
    return int(code) if code.isdigit() else None


def moment(text: str) -> dt.datetime:
    """An RFC 3339 time from Docker (nanoseconds) or labctl (milliseconds), to the microsecond."""
    head, _, fraction = text.rstrip("Z").partition(".")
    try:
        return dt.datetime.fromisoformat(f"{head}.{(fraction + '000000')[:6]}+00:00")
    except ValueError:
        return dt.datetime.min.replace(tzinfo=dt.UTC)


def iso(nano: int) -> str:
    moment = dt.datetime.fromtimestamp(nano / 1e9, dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --- the run's events log, shared with labctl ------------------------------------------------------
def append_new(run_dir: Path, entries: list[dict[str, Any]]) -> int:
    """Append the entries whose Docker event time is not in the log yet, under the run's lock."""
    if not entries:
        return 0
    # The same lock file and modes as labctl's run store (run/store.py): read-only is enough for flock, and
    # a shared home's group may write the run's files.
    lock = os.open(run_dir / ".lock", os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o664)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        log = run_dir / "events.jsonl"
        known = {e.get("docker_time_nano") for e in read_events(log)} - {None}
        fresh = [e for e in entries if e.get("docker_time_nano") not in known]
        if fresh:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o664)
            with os.fdopen(fd, "a", encoding="utf-8") as handle:
                handle.writelines(json.dumps(e) + "\n" for e in fresh)
        return len(fresh)
    finally:
        os.close(lock)


def read_events(log: Path) -> list[dict[str, Any]]:
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    events = []
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            events.append(value)
    return events


# --- the Docker Engine API over its unix socket --------------------------------------------------------
class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("docker", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


class DockerApi:
    def __init__(self, path: str) -> None:
        self.path = path

    def call(self, method: str, url: str, timeout: float | None = 30) -> Any:
        conn = _UnixConnection(self.path, timeout)
        try:
            conn.request(method, url)
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        if response.status == 404:
            return None
        if response.status >= 400:
            raise OSError(f"Docker API {method} {url}: HTTP {response.status} {body[:200]!r}")
        return json.loads(body) if body.strip() else {}

    def stream_events(self, filters: dict[str, list[str]], since: float | None) -> Any:
        query = {"filters": json.dumps(filters)} | ({"since": f"{since:.9f}"} if since else {})
        conn = _UnixConnection(self.path, None)
        conn.request("GET", "/events?" + urllib.parse.urlencode(query))
        response = conn.getresponse()
        if response.status != 200:
            raise OSError(f"Docker API /events: HTTP {response.status}")
        while line := response.readline():
            if line.strip():
                yield json.loads(line)
        raise OSError("the Docker event stream ended")


# --- the watcher ---------------------------------------------------------------------------------------
class Watcher:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.api = DockerApi(args.socket)
        self.run_dir = Path(args.run_dir)
        self.lock = threading.Lock()
        self.hung_restart = threading.Event()
        self.last_die: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.since: float | None = None
        self.hung_start_nano = 0

    def serve(self) -> dict[str, Any] | None:
        filters = json.dumps({"label": [f"labctl.run_id={self.a.run_id}", "com.docker.compose.service=serve"]})
        found = self.api.call("GET", "/containers/json?all=1&filters=" + urllib.parse.quote(filters))
        return found[0] if found else None

    def read_record(self) -> dict[str, Any]:
        try:
            value = json.loads((self.run_dir / "record.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def ended(self) -> bool:
        return self.read_record().get("status") in ENDED or self.serve() is None

    def ready_since(self, started_at: str) -> bool:
        """labctl up saw this start of the engine ready (its record's ready_at is later than StartedAt)."""
        ready_at = self.read_record().get("ready_at")
        return bool(ready_at) and moment(str(ready_at)) >= moment(started_at)

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            append_new(self.run_dir, [entry])

    def check_daemon(self) -> None:
        """Record a daemon restart seen since the last time this watcher ran (see the module's docstring)."""
        state_path = self.run_dir / "watch-state.json"
        daemon_started = os.stat(self.a.socket).st_ctime
        try:
            before = json.loads(state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            before = {}
        serve = self.api.call("GET", f"/containers/{self.a.container}/json") or {}
        serve_state = serve.get("State") or {}
        if before.get("daemon_started") and abs(before["daemon_started"] - daemon_started) > 0.5:
            nano = int(daemon_started * 1e9)
            self.record(
                {
                    "at": iso(nano),
                    "event": "daemon-restart",
                    "by": "docker",
                    "seen_by": "labctl-watch",
                    "daemon_started_at": iso(nano),
                    "previous_daemon_started_at": iso(int(before["daemon_started"] * 1e9)),
                    "engine_running": bool(serve_state.get("Running")),
                    "engine_started_at": serve_state.get("StartedAt"),
                    "docker_time_nano": nano,
                }
            )
        # When Docker starts this watcher again on the same daemon, the events it missed meanwhile are
        # replayed from the last one it handled (or its first start); a new daemon remembers none of them.
        same_daemon = bool(before) and before.get("daemon_started") == daemon_started
        since = float(before.get("since") or time.time()) if same_daemon else time.time()
        state_path.write_text(json.dumps({"daemon_started": daemon_started, "since": since}), encoding="utf-8")
        self.since = since if same_daemon else None

    def remember(self, nano: int) -> None:
        state_path = self.run_dir / "watch-state.json"
        try:
            state = json.loads(state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            state = {}
        state["since"] = nano / 1e9
        state_path.write_text(json.dumps(state), encoding="utf-8")

    def follow_events(self) -> None:
        filters = {"type": ["container"], "label": [f"labctl.run_id={self.a.run_id}"], "event": list(WATCH_ACTIONS)}
        window: list[dict[str, Any]] = []
        try:
            for event in self.api.stream_events(filters, self.since):
                window = [*window[-20:], event]
                action = str(event.get("Action") or "")
                attrs = (event.get("Actor") or {}).get("Attributes") or {}
                if attrs.get("com.docker.compose.service") != "serve":
                    continue
                if action == "destroy":
                    return
                if action == "die":
                    self.last_die = {"exit_code": exit_code(attrs)}
                if action == "start":
                    entries = restart_entries(window, "labctl-watch")
                    window = []
                    if self.hung_restart.is_set():
                        self.hung_start_nano = int(event.get("timeNano") or 0)
                        self.hung_restart.clear()
                        continue  # the watcher's own restart: recorded as hung-restart, under this event's time
                    with self.lock:
                        append_new(self.run_dir, entries)
                    self.remember(int(event.get("timeNano") or 0))
        except BaseException as exc:
            self.error = exc

    def probe(self) -> str | None:
        """None when healthy, else why not."""
        try:
            with urllib.request.urlopen(self.a.probe_url, timeout=self.a.probe_timeout) as response:
                return None if response.status == 200 else f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            return f"no answer ({getattr(exc, 'reason', exc)})"

    def watch_health(self) -> None:
        healthy_once, failures, reason, start = False, 0, "", ""
        while True:
            time.sleep(self.a.interval)
            if self.error is not None or self.ended():
                return
            state = (self.api.call("GET", f"/containers/{self.a.container}/json") or {}).get("State") or {}
            if not state.get("Running"):
                healthy_once, failures = False, 0
                continue
            if state.get("StartedAt") != start:  # a new start: it must answer healthy once before a hang counts
                start = str(state.get("StartedAt"))
                healthy_once, failures = self.ready_since(start), 0
            problem = self.probe()
            if problem is None:
                healthy_once, failures = True, 0
                continue
            if not healthy_once:
                continue  # still starting: a cold start is not a hang
            failures, reason = failures + 1, problem
            if failures >= self.a.failures:
                self.restart_hung(failures, reason, state)
                healthy_once, failures = False, 0

    def restart_hung(self, failures: int, reason: str, state: dict[str, Any]) -> None:
        self.last_die, self.hung_start_nano = {}, 0
        self.hung_restart.set()
        started = time.time()
        self.api.call("POST", f"/containers/{self.a.container}/restart?t={self.a.stop_timeout}", timeout=None)
        for _ in range(50):  # the event stream's `start` of this restart gives the entry its Docker event time
            if self.hung_start_nano:
                break
            time.sleep(0.1)
        self.record(
            {
                "at": iso(int(started * 1e9)),
                "event": "hung-restart",
                "by": "labctl-watch",
                "reason": f"{self.a.probe_url} failed {failures} times in a row, {self.a.interval:g} s apart "
                f"(last: {reason}) while the engine process ran (started {state.get('StartedAt')})",
                "exit_code": self.last_die.get("exit_code"),
                "docker_time_nano": self.hung_start_nano or int(started * 1e9),
            }
        )

    def run(self) -> int:
        try:
            self.check_daemon()
            if self.ended():
                return self.leave()
            threading.Thread(target=self.follow_events, daemon=True).start()
            self.watch_health()
        except OSError as exc:  # the daemon went away (a restart, most likely)
            self.error = exc
        if self.error is not None:
            print(f"labctl-watch: {self.error}; exiting so that Docker starts the watcher again", file=sys.stderr)
            return 1
        return self.leave()

    def leave(self) -> int:
        """The run ended: remove this watcher's own container (an exit alone would be restarted)."""
        print(f"labctl-watch: run {self.a.run_id} ended; removing {self.a.name}", file=sys.stderr, flush=True)
        with contextlib.suppress(OSError):
            self.api.call("DELETE", f"/containers/{self.a.name}?force=1")
        return 0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="labctl-watch")
    p.add_argument("--run-id", required=True)
    p.add_argument("--name", required=True, help="this watcher's own container name")
    p.add_argument("--container", required=True, help="the serve container's name")
    p.add_argument("--run-dir", default="/labctl-run")
    p.add_argument("--socket", default="/var/run/docker.sock")
    p.add_argument("--probe-url", required=True)
    p.add_argument("--probe-timeout", type=float, default=2.0)
    p.add_argument("--interval", type=float, default=10.0)
    p.add_argument("--failures", type=int, default=6)
    p.add_argument("--stop-timeout", type=int, default=10)
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(Watcher(parse(sys.argv[1:])).run())
