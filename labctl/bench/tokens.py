"""Prompt lengths in the model's own tokens, when its tokenizer is already in the Hugging Face cache or in a
local model folder given with --tokenizer (the `tokenizers` package reads it; nothing is ever downloaded);
otherwise in words, said so."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl.catalog.sourcefile import read_bounded
from labctl.errors import BadInput

# A repository id as the Hub spells it: owner/name, each part letters, digits, '.', '_', '-'.
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_REVISION = re.compile(r"[0-9a-f]{40}")
# The largest tokenizer.json on the Hub is ~35 MB (multilingual vocabularies); more is not a tokenizer.
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024


def hub_cache() -> Path:
    """Where huggingface_hub keeps repositories: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


@dataclass(frozen=True)
class Counter:
    """Counts tokens with the model's tokenizer, or words without one; `unit` says which, for the result."""

    unit: str  # "tokens" or "words"
    source: str  # the tokenizer file, or why there is none
    tokenizer: Any = field(default=None, compare=False, hash=False)
    _word_cache: dict[str, int] = field(default_factory=dict, compare=False, hash=False)

    def count(self, text: str) -> int:
        if self.tokenizer is None:
            return len(text.split())
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def count_as_sent(self, texts: list[str]) -> list[int]:
        """Each text's length as vLLM's benchmark counts it (`tokenizer(text).input_ids`: special tokens
        included); words without a tokenizer."""
        if self.tokenizer is None:
            return [len(text.split()) for text in texts]
        return [len(e.ids) for e in self.tokenizer.encode_batch(texts, add_special_tokens=True)]

    def word_cost(self, word: str) -> int:
        """Tokens one space-led word adds to a prompt (cached: prompts are built from a small vocabulary)."""
        if self.tokenizer is None:
            return 1
        cost = self._word_cache.get(word)
        if cost is None:
            cost = self._word_cache[word] = max(1, self.count(" " + word))
        return cost

    def fit(self, text: str, length: int) -> str:
        """Trim text to at most `length` tokens (words without a tokenizer)."""
        if self.tokenizer is None:
            return " ".join(text.split()[:length])
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return text if len(ids) <= length else str(self.tokenizer.decode(ids[:length]))

    def facts(self) -> dict[str, str]:
        return {"length_unit": self.unit, "tokenizer": self.source}


WORDS = Counter("words", "none: lengths are counted in words (labctl's fallback)")


def tokenizer_counter(given: str) -> Counter:
    """--tokenizer: a local model folder (a path that exists, or one spelled as a path) holding tokenizer.json,
    else a Hub repository id read from the cache."""
    folder = Path(given).expanduser()
    if not folder.is_dir():
        if spelled_as_path(given) or folder.exists():
            raise BadInput(
                f"--tokenizer {given[:120]!r}: no such folder. Give a model folder holding tokenizer.json, or a Hub "
                "repository id (owner/name) whose tokenizer is in the HF cache."
            )
        return counter_for(given)
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise BadInput(
            f"--tokenizer {given[:120]!r}: the folder holds no tokenizer.json (labctl reads the fast-tokenizer file "
            "that model folders ship). Give the model's own folder."
        )
    return _read_tokenizer(path.resolve())


def spelled_as_path(given: str) -> bool:
    """`/x`, `./x`, `../x`, `~/x`, `.` or `..`: a folder was meant, never a Hub repository id."""
    return given.startswith(("/", "./", "../", "~")) or given in (".", "..")


def counter_for(model_id: str | None) -> Counter:
    """The model's tokenizer from the local cache, or words (with the reason) when it is not there."""
    if not model_id or not _REPO_ID.fullmatch(model_id):
        return Counter(
            "words", f"none: {str(model_id)[:80]!r} is not a Hub repository id (owner/name); lengths in words"
        )
    repo = hub_cache() / ("models--" + model_id.replace("/", "--"))
    path = _snapshot_file(repo, "tokenizer.json")
    if path is None:
        return Counter(
            "words", f"none: {model_id}'s tokenizer.json is not in the HF cache ({hub_cache()}); lengths in words"
        )
    return _read_tokenizer(path)


def _read_tokenizer(path: Path) -> Counter:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return Counter(
            "words", "none: the tokenizers package is not installed (pip install tokenizers); lengths in words"
        )
    text = read_bounded(path, str(path), MAX_TOKENIZER_BYTES).decode("utf-8", "replace")
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as exc:  # the tokenizers package raises plain Exception for a file it cannot read
        raise BadInput(f"{path}: not a tokenizer the tokenizers package can read ({str(exc)[:120]}).") from None
    return Counter("tokens", str(path), tokenizer)


def _snapshot_file(repo: Path, name: str) -> Path | None:
    """refs/main's snapshot when the cache records it, else the only snapshot; the file stays inside the cache."""
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    revision = ref.read_text(errors="replace").strip()[:64] if ref.is_file() else ""
    candidates = [snapshots / revision] if _REVISION.fullmatch(revision) else sorted(snapshots.iterdir())
    for snapshot in candidates:
        path = snapshot / name
        if path.is_file():
            resolved = path.resolve()
            if hub_cache().resolve() not in resolved.parents:
                raise BadInput(
                    f"{path} leads outside the HF cache (to {resolved}); labctl reads tokenizers only inside it."
                )
            return resolved
    return None
