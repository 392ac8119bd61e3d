"""LoopbackHub: a minimal Hugging Face Hub API server on 127.0.0.1, serving repositories built from folders:
the lab's tiny models (build/tiny-models, `labctl hub serve`, and `labctl fetch` of a profile whose model says
`hub: loopback`), and the tests' stand-in repositories. A repository's commit is derived from its files'
bytes, so the same bytes always give the same commit, and a profile can pin it.

Why not a real mirror: `olah` (PyPI, a self-hosted Hub mirror) serves locally created git repositories,
but its local-mirror file route streams the whole blob and ignores `Range` (no resume), it has no gated
repositories, and it brings fastapi, uvicorn, GitPython and a database along. No other package on PyPI
serves the Hub API from local folders. So this is exactly what `huggingface_hub.snapshot_download` calls,
answered the way huggingface.co answers it (same headers, same error codes), and nothing more:

    GET  /api/models/ORG/NAME/revision/REV    repo info: {"id", "sha", "siblings"}      (repo_info)
    GET  /api/models/ORG/NAME/tree/REV        the file list, with sizes and blob ids   (list_repo_tree)
    HEAD /ORG/NAME/resolve/REV/PATH           X-Repo-Commit, ETag, Content-Length      (file metadata)
    GET  /ORG/NAME/resolve/REV/PATH           the bytes; `Range: bytes=N-` gives 206    (download, resume)

A dataset repository (repo_type "dataset") answers the same routes under /api/datasets/… and /datasets/….

Errors as the Hub sends them: a missing repository 401 + X-Error-Code RepoNotFound, a missing revision
404 RevisionNotFound, a missing file 404 EntryNotFound, a gated repository's files 401 (no token) or
403 (a token without access) + GatedRepo. The server counts the bytes it sent and records each
request's path and whether an Authorization header came (never its value), so tests can check what a
fetch transferred. `rate` throttles file bodies (bytes per second) so a test can kill a fetch mid-file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@functools.lru_cache(maxsize=256)  # a bytes object caches its own hash: a hit costs no rehash of the content
def blob_id(data: bytes) -> str:
    """git's blob sha1, which the Hub gives as a non-LFS file's oid and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubRepo:
    repo_id: str
    files: dict[str, bytes]
    branches: dict[str, str] = field(default_factory=dict)
    gated: bool = False
    claimed: dict[str, int] = field(default_factory=dict)  # sizes the listing and HEAD state, not what GET sends
    repo_type: str = "model"

    @property
    def commit(self) -> str:
        listing = json.dumps({p: blob_id(d) for p, d in sorted(self.files.items())}, sort_keys=True)
        return hashlib.sha1(f"{self.repo_id}\n{listing}".encode()).hexdigest()

    def resolve(self, revision: str) -> str | None:
        if revision == self.commit:
            return revision
        return self.branches.get(revision)


def repo_from_folder(repo_id: str, folder: Path, gated: bool = False, repo_type: str = "model") -> HubRepo:
    files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    repo = HubRepo(repo_id, files, gated=gated, repo_type=repo_type)
    repo.branches["main"] = repo.commit
    return repo


def repos_in(folder: Path, org: str | None = None) -> dict[str, HubRepo]:
    """One repository per model folder: ORG/NAME/ folders, or (with `org`) NAME/ folders named ORG/NAME."""
    out = {}
    folders = sorted(p for p in folder.glob("*" if org else "*/*") if p.is_dir() and not p.name.startswith("."))
    for model in folders:
        repo_id = f"{org}/{model.name}" if org else f"{model.parent.name}/{model.name}"
        out[repo_id] = repo_from_folder(repo_id, model)
    return out


@dataclass
class Served:
    method: str
    path: str
    status: int
    body_bytes: int
    authorized: bool  # an Authorization header came (its value is never kept)


class LoopbackHub:
    def __init__(
        self,
        repos: dict[str, HubRepo],
        rate: float | None = None,
        port: int = 0,
        granted_token: str | None = None,  # the one token a gated repository accepts
    ) -> None:
        self.repos = dict(repos)
        self.rate = rate
        self.granted_token = granted_token
        self.served: list[Served] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def bytes_sent(self, repo_id: str) -> int:
        with self.lock:
            return sum(
                s.body_bytes
                for s in self.served
                if s.path.startswith((f"/{repo_id}/resolve/", f"/datasets/{repo_id}/resolve/"))
            )

    def add(self, repo: HubRepo) -> HubRepo:
        self.repos[repo.repo_id if repo.repo_type == "model" else f"datasets/{repo.repo_id}"] = repo
        return repo

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
                pass

            def do_HEAD(self) -> None:
                self.answer(head=True)

            def do_GET(self) -> None:
                self.answer(head=False)

            def answer(self, head: bool) -> None:
                path = unquote(urlsplit(self.path).path)
                sent = 0
                status = 500
                try:
                    status, sent = self.route(path, head)
                except (BrokenPipeError, ConnectionResetError):
                    status = 499
                finally:
                    with hub.lock:
                        hub.served.append(
                            Served(
                                self.command, path, status, sent, "authorization" in {k.lower() for k in self.headers}
                            )
                        )

            def route(self, path: str, head: bool) -> tuple[int, int]:
                api = re.fullmatch(r"/api/(models|datasets)/([^/]+/[^/]+)/(revision|tree)/([^/]+)(?:/.*)?", path)
                if api:
                    return self.api(self.key(api.group(1), api.group(2)), api.group(3), api.group(4))
                resolve = re.fullmatch(r"/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if resolve:
                    kind = "datasets" if resolve.group(1) else "models"
                    return self.file(self.key(kind, resolve.group(2)), resolve.group(3), resolve.group(4), head)
                return self.error(404, "EntryNotFound", f"no route {path}")

            def key(self, kind: str, repo_id: str) -> str:
                """A dataset is kept under "datasets/ORG/NAME", so it never answers as the model of that name."""
                return repo_id if kind == "models" else f"datasets/{repo_id}"

            def api(self, repo_id: str, kind: str, revision: str) -> tuple[int, int]:
                repo = hub.repos.get(repo_id)
                if repo is None:
                    return self.error(401, "RepoNotFound", "Repository Not Found")
                commit = repo.resolve(revision)
                if commit is None:
                    return self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                if kind == "revision":
                    body: object = {
                        "id": repo.repo_id,
                        "modelId": repo.repo_id,
                        "sha": commit,
                        "private": False,
                        "gated": "manual" if repo.gated else False,
                        "siblings": [{"rfilename": p} for p in sorted(repo.files)],
                    }
                else:
                    body = [
                        {"type": "file", "oid": blob_id(d), "size": repo.claimed.get(p, len(d)), "path": p}
                        for p, d in sorted(repo.files.items())
                    ]
                return self.send_json(200, body)

            def file(self, repo_id: str, revision: str, name: str, head: bool) -> tuple[int, int]:
                repo = hub.repos.get(repo_id)
                if repo is None:
                    return self.error(401, "RepoNotFound", "Repository Not Found")
                if repo.gated:
                    auth = self.headers.get("Authorization", "")
                    if not auth:
                        return self.error(401, "GatedRepo", f"Access to model {repo_id} is restricted. Log in.")
                    if hub.granted_token is None or auth != f"Bearer {hub.granted_token}":
                        return self.error(403, "GatedRepo", f"Access to model {repo_id} is restricted: not granted.")
                commit = repo.resolve(revision)
                if commit is None:
                    return self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                data = repo.files.get(name)
                if data is None:
                    return self.error(404, "EntryNotFound", f"{name} does not exist at {revision}")
                start = 0
                wanted = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
                if wanted and not head:
                    start = min(int(wanted.group(1)), len(data))
                status = 206 if start else 200
                self.send_response(status)
                self.send_header("X-Repo-Commit", commit)
                self.send_header("ETag", f'"{blob_id(data)}"')
                self.send_header("Accept-Ranges", "bytes")
                length = repo.claimed[name] if head and name in repo.claimed else len(data) - start
                self.send_header("Content-Length", str(length))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if head:
                    return status, 0
                return status, self.stream(data[start:])

            def stream(self, body: bytes) -> int:
                chunk = 64 * 1024
                sent = 0
                for offset in range(0, len(body), chunk):
                    piece = body[offset : offset + chunk]
                    try:
                        self.wfile.write(piece)
                        self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        return sent
                    sent += len(piece)
                    if hub.rate:
                        time.sleep(len(piece) / hub.rate)
                return sent

            def send_json(self, status: int, body: object) -> tuple[int, int]:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                return status, 0

            def error(self, status: int, code: str, message: str) -> tuple[int, int]:
                data = json.dumps({"error": message}).encode()
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", message)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                return status, 0

        return Handler

    def __enter__(self) -> LoopbackHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def serve_until_stopped(self) -> None:
        try:
            self.server.serve_forever()
        finally:
            self.server.server_close()


@contextmanager
def loopback_hub(repos: dict[str, HubRepo], rate: float | None = None, port: int = 0) -> Iterator[LoopbackHub]:
    with LoopbackHub(repos, rate, port) as hub:
        yield hub
