"""What an endpoint says about itself without a labctl run behind it: its engine's version (vLLM's
`/version`, SGLang's `/server_info`), and what a 401 means depending on whether a key was sent."""

from __future__ import annotations

import json
from typing import Any

import httpx

# vLLM's, then SGLang's: 0.5.23 deprecates /get_server_info (a warning on every call); /server_info replaces it
VERSION_PROBES = ("/version", "/server_info")
MAX_INFO_BYTES = 256 * 1024  # a version answer is a few bytes; SGLang's server info a few KiB
INFO_TIMEOUT = 5.0


def probe_engine_version(root: str, api_key: str | None) -> dict[str, Any] | None:
    """`{"version": V, "from": PATH}` from the first probe that answers 200 with a version, else None. Only
    the version is kept: SGLang's server info carries its server arguments, the API key among them."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    for path in VERSION_PROBES:
        try:
            with httpx.stream("GET", root + path, headers=headers, timeout=INFO_TIMEOUT) as response:
                if response.status_code != 200:
                    continue
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_INFO_BYTES:
                        break
        except httpx.HTTPError:
            continue
        try:
            data = json.loads(bytes(body))
        except ValueError:
            continue
        version = data.get("version") if isinstance(data, dict) else None
        if isinstance(version, str) and version.isprintable() and 0 < len(version) <= 64:
            return {"version": version, "from": path}
    return None


def unauthorized(url: str, key_from: str | None) -> str:
    """The message for a 401: a key that was sent and refused is wrong (or rotated), not missing."""
    if key_from is None:
        return (
            f"{url} answered 401: it wants an API key. Put it in a variable and pass --api-key-env NAME (the "
            "key never goes on the command line)."
        )
    return (
        f"{url} answered 401 to the API key labctl sent ({key_from}): the key is wrong, or was rotated. Check "
        "that it is this endpoint's current key (a resident run's key changes with `labctl rotate-key`)."
    )
