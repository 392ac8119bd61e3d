"""The labels on every container labctl starts: where a run's truth lives on its host. Written and read
only through `RunLabels`, so every reader agrees on what a label means."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

PREFIX = "labctl."
RUN_ID = "labctl.run_id"


@dataclass(frozen=True)
class GpuClaim:
    """Which GPUs a run holds: concrete ids, or (not yet placed) a count, or none."""

    ids: tuple[str, ...] = ()
    count: int = 0

    @classmethod
    def parse(cls, text: str) -> GpuClaim:
        if text in ("", "none"):
            return cls()
        if text.startswith("count:"):
            number = text.removeprefix("count:")
            return cls(count=int(number) if re.fullmatch(r"[0-9]{1,4}", number) else 0)
        ids = tuple(part for part in text.split(",") if part)
        return cls(ids=ids, count=len(ids))

    def __str__(self) -> str:
        if self.ids:
            return ",".join(self.ids)
        return f"count:{self.count}" if self.count else "none"


@dataclass(frozen=True)
class RunLabels:
    # what the setup is (pure: from the profile, written by the renderer)
    engine: str = "?"
    profile: str = "?"
    profile_sha256: str = ""
    gpus: GpuClaim = GpuClaim()
    model: str = ""
    model_revision: str = ""
    environment_label: str = ""
    allow_unsupported: bool = False
    version: str = ""
    build: dict[str, str] = field(default_factory=dict)
    # which run this is (added by `labctl up`)
    run_id: str = ""
    owner: str = "?"
    created_at: str = ""
    port: str = ""
    host: str = ""
    resident: bool = False
    home: str = ""  # the labctl home whose runs/ holds the record: a command from another home finds it here
    controller: str = ""  # the machine that ran `labctl up`

    @classmethod
    def from_labels(cls, labels: dict[str, str]) -> RunLabels:
        def text(name: str, default: str = "") -> str:
            return str(labels.get(PREFIX + name, default))

        return cls(
            engine=text("engine", "?"),
            profile=text("profile", "?"),
            profile_sha256=text("profile_sha256"),
            gpus=GpuClaim.parse(text("gpus", "none")),
            model=text("model"),
            model_revision=text("model_revision"),
            environment_label=text("environment_label"),
            allow_unsupported=text("allow_unsupported") == "true",
            version=text("version"),
            build={
                k.removeprefix(PREFIX + "build."): str(v) for k, v in labels.items() if k.startswith(PREFIX + "build.")
            },
            run_id=text("run_id"),
            owner=text("owner", "?"),
            created_at=text("created_at"),
            port=text("port"),
            host=text("host"),
            resident=text("resident") == "true",
            home=text("home"),
            controller=text("controller"),
        )

    def to_labels(self) -> dict[str, str]:
        labels: dict[str, str] = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if item.name == "build":
                labels.update({f"{PREFIX}build.{k}": str(v) for k, v in value.items()})
            elif item.name in _RUN_FIELDS and value in ("", "?"):
                continue  # a setup's labels (render) carry no run fields yet
            elif isinstance(value, bool):
                labels[PREFIX + item.name] = "true" if value else "false"
            else:
                labels[PREFIX + item.name] = str(value)
        return labels

    def setup_labels(self) -> dict[str, str]:
        """Only what the setup is: the labels the renderer writes before a run exists."""
        return {k: v for k, v in self.to_labels().items() if _field_of(k) not in _RUN_ONLY}

    def run_labels(self) -> dict[str, str]:
        """Only which run this is: what `labctl up` adds to the setup's labels."""
        return {k: v for k, v in self.to_labels().items() if _field_of(k) in _RUN_ONLY}


_RUN_FIELDS = {"run_id", "owner", "created_at", "port", "host", "home", "controller"}
_RUN_ONLY = _RUN_FIELDS | {"resident"}


def _field_of(label: str) -> str:
    return label.removeprefix(PREFIX).split(".", 1)[0]
