"""An image reference, `registry:5000/name:tag@sha256:<hex>`, parsed in one place."""

from __future__ import annotations

import re
from dataclasses import dataclass

from labctl.errors import BadInput

# Docker's own grammar, reduced: lower-case path components, an optional registry (a dotted name,
# localhost, or name:port), a tag of up to 128 word characters. \Z, not $: a trailing newline is not
# part of a valid reference.
_REPOSITORY = re.compile(
    r"(?:(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+)(?::[0-9]{1,5})?/|[a-zA-Z0-9-]+:[0-9]{1,5}/)?"
    r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*\Z"
)
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class ImageRef:
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        """Raises ValueError with a reason; callers say where the reference came from."""
        if len(text) > 512:
            raise ValueError("longer than 512 characters")
        name, _, digest = text.partition("@")
        last = name.rsplit("/", 1)[-1]
        repository, tag = name.rsplit(":", 1) if ":" in last else (name, None)
        if not _REPOSITORY.match(repository):
            raise ValueError(f"{repository!r} is not a repository name like registry:5000/org/name")
        if tag is not None and not _TAG.match(tag):
            raise ValueError(f"{tag!r} is not a tag")
        if digest and not DIGEST.match(digest):
            raise ValueError(f"malformed digest {digest!r}: expected sha256: followed by 64 lower-case hex digits")
        if "@" in text and not digest:
            raise ValueError("an empty digest after '@'")
        return cls(repository, tag, digest or None)

    @classmethod
    def parse_or_refuse(cls, text: str, where: str) -> ImageRef:
        try:
            return cls.parse(text)
        except ValueError as exc:
            raise BadInput(f"{where}: {exc}.") from None

    @property
    def pinned(self) -> bool:
        return self.digest is not None

    @property
    def tagged(self) -> str:
        """repository:tag (what a person reads), without the digest."""
        return f"{self.repository}:{self.tag}" if self.tag else self.repository

    @property
    def by_digest(self) -> str:
        """repository@digest: what Docker pulls when the digest decides."""
        if self.digest is None:
            raise ValueError(f"{self} is not pinned by digest")
        return f"{self.repository}@{self.digest}"

    def with_digest(self, digest: str) -> ImageRef:
        """Raises ValueError for a malformed digest: digests arrive from exports and records too."""
        if not DIGEST.match(digest):
            raise ValueError(f"malformed digest {digest[:80]!r}: expected sha256: followed by 64 lower-case hex digits")
        return ImageRef(self.repository, self.tag, digest)

    def __str__(self) -> str:
        return self.tagged + (f"@{self.digest}" if self.digest else "")


def digests_of(repo_digests: list[str] | tuple[str, ...], repository: str) -> list[str]:
    """The digests among Docker's RepoDigests (`repo@sha256:…`) that belong to one repository."""
    found = []
    for entry in repo_digests:
        try:
            ref = ImageRef.parse(entry)
        except ValueError:
            continue
        if ref.repository == repository and ref.digest:
            found.append(ref.digest)
    return found
