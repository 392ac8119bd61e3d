"""A workload's dataset from the Hugging Face Hub (repository, revision, file): where `labctl fetch --workload`
put it in the Hub cache (datasets--ORG--NAME), read offline by bench."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labctl.compose.options import default_cache_dir
from labctl.errors import BadInput
from labctl.host.hub.cache import COMMIT, inside, repo_folder


@dataclass(frozen=True)
class HubDataset:
    workload: str
    repo: str
    revision: str
    file: str

    @property
    def source(self) -> str:
        return f"{self.repo}@{self.revision} ({self.file})"

    @property
    def fetch_command(self) -> str:
        return f"labctl fetch --workload {self.workload}"

    def folder(self, cache_dir: str | None = None) -> Path:
        return repo_folder(Path(cache_dir or default_cache_dir()) / "hub", self.repo, "dataset")

    def commit(self, cache_dir: str | None = None) -> str | None:
        """The commit the revision names: itself, else the branch's ref as the last fetch wrote it."""
        if COMMIT.fullmatch(self.revision):
            return self.revision
        ref = self.folder(cache_dir) / "refs" / self.revision
        text = ref.read_text(encoding="ascii", errors="replace").strip()[:64] if ref.is_file() else ""
        return text if COMMIT.fullmatch(text) else None

    def cached_file(self, cache_dir: str | None = None) -> Path | None:
        """The file in the cache's snapshot, or None when it has not been fetched."""
        commit = self.commit(cache_dir)
        if commit is None:
            return None
        folder = self.folder(cache_dir)
        path = folder / "snapshots" / commit / self.file
        if not path.is_file():
            return None
        inside(folder / "snapshots" / commit, path, folder.parent)  # a symlink may not lead out of the cache
        return path

    def locate(self, cache_dir: str | None = None) -> Path:
        """The file, read offline; refused with the one command that fetches it."""
        path = self.cached_file(cache_dir)
        if path is None:
            cache = cache_dir or default_cache_dir()
            raise BadInput(
                f"workload {self.workload}: its dataset {self.source} is not in the Hub cache ({cache}): run "
                f"`{self.fetch_command}` first."
            )
        return path


def hub_dataset_of(name: str, hub: tuple[str, str, str] | None) -> HubDataset | None:
    return None if hub is None else HubDataset(name, *hub)
