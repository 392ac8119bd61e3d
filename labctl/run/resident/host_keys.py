"""A remote run's API keys on its own host (host/remote/key_volume.py): which image fills the key volume and whose
the file is there. The controller keeps its KeyStore copy too: `share` and `rotate-key` read it."""

from __future__ import annotations

from labctl.host.docker import daemon as dk
from labctl.host.remote import key_volume
from labctl.run.records.record import ImageInfo
from labctl.run.resident.resident_plan import image_user_ids
from labctl.run.resident.watch import DEFAULT_IMAGE


def file_owner(image: ImageInfo) -> str:
    """The engine image's user, as chown takes it: `uid:gid` when numeric (root when unset), else its name."""
    ids = image_user_ids(image.user)
    return f"{ids[0]}:{ids[1]}" if ids is not None else image.user


def fill_image(image: ImageInfo) -> str:
    """The lab's base image when the host has it and the owner is numeric; else the engine's own image,
    already on the host (and the only one that knows its user names)."""
    if image_user_ids(image.user) is not None and dk.image_facts(DEFAULT_IMAGE) is not None:
        return DEFAULT_IMAGE
    return image.image_id or image.reference or ""


def put_keys(run_id: str, keys: list[str], image: ImageInfo, file: str = "api_key") -> str:
    """Write the run's keys (or, as `engine_key`, the engine's own key behind labctl's proxy) into its key
    volume on the active host; returns the volume's name."""
    return key_volume.write_keys(run_id, "\n".join(keys) + "\n", fill_image(image), file_owner(image), file)


def remove_keys(run_id: str) -> bool:
    return key_volume.remove(run_id)
