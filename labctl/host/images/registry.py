"""A registry at the edge: the Registry HTTP API v2, asked for manifests only (never layers): anonymously first,
then, when it answers 401, with the login Docker already has for it (host/images/logins.py), through Basic
authentication or the token flow registries such as Docker Hub and NGC demand. Every answer is untrusted: bodies are bounded,
each manifest must hash to the digest it is served under, and plain http is used only where Docker itself
would (a loopback registry, or one the daemon lists as insecure)."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any

import httpx

from labctl.catalog.image import DIGEST, ImageRef
from labctl.errors import BadInput, LabctlError
from labctl.host.images.logins import Login, config_path, login_for

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
IMAGE_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(INDEX_TYPES + IMAGE_TYPES)
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # the limit registries themselves apply to a manifest
MAX_TOKEN_BYTES = 64 * 1024
MAX_SIZE = 2**50  # a layer size beyond a petabyte is a hostile answer, not an image
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Platform:
    os: str
    architecture: str
    variant: str | None = None

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


@dataclass(frozen=True)
class Resolved:
    """What a tag or digest means for one platform: the image manifest's digest (what Docker pulls and
    records), the index it came from when the image is multi-arch, and the layers' compressed size."""

    digest: str
    index_digest: str | None
    platform: Platform | None
    compressed_bytes: int
    layers: tuple[tuple[str, int], ...]  # (digest, compressed size) of each layer
    config_digest: str = ""  # the image config's digest: Docker's image id once pulled or loaded


@dataclass(frozen=True)
class Registry:
    host: str  # as written in the reference, e.g. 127.0.0.1:5000 or docker.io
    api: str  # base URL of its API, e.g. http://127.0.0.1:5000
    path: str  # the repository inside it, e.g. library/ubuntu


def locate(ref: ImageRef, insecure: frozenset[str] = frozenset(), insecure_cidrs: tuple[str, ...] = ()) -> Registry:
    first, _, rest = ref.repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = "docker.io", ref.repository
    if host in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        return Registry(host, "https://registry-1.docker.io", path if "/" in path else f"library/{path}")
    scheme = "http" if plain_http_allowed(host, insecure, insecure_cidrs) else "https"
    return Registry(host, f"{scheme}://{host}", path)


def plain_http_allowed(host: str, insecure: frozenset[str], insecure_cidrs: tuple[str, ...]) -> bool:
    """Docker's own rule: loopback, or a registry the daemon's configuration marks as insecure."""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if name == "localhost" or host in insecure or name in insecure:
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if address.is_loopback:
        return True
    return any(address in ipaddress.ip_network(cidr, strict=False) for cidr in insecure_cidrs)


def resolve(
    ref: ImageRef,
    platform: Platform,
    insecure: frozenset[str] = frozenset(),
    insecure_cidrs: tuple[str, ...] = (),
) -> Resolved:
    """The platform's manifest for a tag (or a digest), without downloading any layer."""
    registry = locate(ref, insecure, insecure_cidrs)
    reference = ref.digest or ref.tag or "latest"
    with httpx.Client(timeout=TIMEOUT, follow_redirects=False, trust_env=False) as client:
        session = _Session(client, registry, str(ref))
        first_digest, first = session.manifest(reference, expected=ref.digest)
        if first.get("mediaType") in INDEX_TYPES or "manifests" in first:
            entry = choose(first, platform, str(ref), registry.host)
            digest, manifest = session.manifest(entry[0], expected=entry[0])
            if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
                raise LabctlError(
                    f"{ref}: the registry {registry.host} nests an index inside an index; labctl refuses it."
                )
            return _image(digest, first_digest, entry[1], manifest, str(ref), registry.host)
        return _image(first_digest, None, None, first, str(ref), registry.host)


def choose(index: dict[str, Any], platform: Platform, what: str, host: str) -> tuple[str, Platform]:
    entries = index.get("manifests")
    if not isinstance(entries, list) or len(entries) > 1000:
        raise LabctlError(f"{what}: the registry {host} sent an index without a valid 'manifests' list.")
    offered: list[tuple[str, Platform]] = []
    for entry in entries:
        spec = entry.get("platform") if isinstance(entry, dict) else None
        digest = entry.get("digest") if isinstance(entry, dict) else None
        if not isinstance(spec, dict) or not isinstance(digest, str) or not DIGEST.match(digest):
            continue
        os_, arch, variant = spec.get("os"), spec.get("architecture"), spec.get("variant")
        if isinstance(os_, str) and isinstance(arch, str):
            offered.append((digest, Platform(os_, arch, variant if isinstance(variant, str) else None)))
    matching = [o for o in offered if o[1].os == platform.os and o[1].architecture == platform.architecture]
    exact = [o for o in matching if platform.variant is None or o[1].variant in (None, platform.variant)]
    if exact:
        return exact[0]
    known = ", ".join(sorted({str(p) for _d, p in offered if p.os != "unknown"})) or "none"
    raise BadInput(
        f"{what} has no image for this host's platform {platform} (the index offers: {known}). "
        "Use an image built for it, or pick another host with --host."
    )


def _image(
    digest: str, index_digest: str | None, platform: Platform | None, manifest: dict[str, Any], what: str, host: str
) -> Resolved:
    layers = manifest.get("layers")
    config = manifest.get("config")
    if not isinstance(layers, list) or not isinstance(config, dict):
        raise LabctlError(f"{what}: the registry {host} sent a manifest without 'config' and 'layers'.")
    sizes = [config.get("size")] + [layer.get("size") if isinstance(layer, dict) else None for layer in layers]
    if not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < MAX_SIZE for s in sizes):
        raise LabctlError(f"{what}: the registry {host} sent a manifest with a missing or impossible layer size.")
    digests = [layer.get("digest") for layer in layers]
    if not all(isinstance(d, str) and DIGEST.match(d) for d in digests):
        raise LabctlError(f"{what}: the registry {host} sent a manifest with a malformed layer digest.")
    config_digest = config.get("digest")
    if not isinstance(config_digest, str) or not DIGEST.match(config_digest):
        raise LabctlError(f"{what}: the registry {host} sent a manifest with a malformed config digest.")
    total = sum(s for s in sizes if isinstance(s, int))
    pairs = tuple((str(d), int(layer["size"])) for d, layer in zip(digests, layers, strict=True))
    return Resolved(digest, index_digest, platform, total, pairs, config_digest)


class _Session:
    def __init__(self, client: httpx.Client, registry: Registry, what: str) -> None:
        self.client, self.registry, self.what = client, registry, what
        self.authorization: str | None = None  # the header a 401 led to: a Bearer token, or Basic with a login
        self.login: Login | None = None  # the login Docker has for this registry, once a 401 asked for one

    def manifest(self, reference: str, expected: str | None) -> tuple[str, dict[str, Any]]:
        """(digest, parsed manifest). The digest is the hash of the bytes received: a registry's header
        that disagrees with it, or an answer to a digest request that hashes to another digest, is refused."""
        url = f"{self.registry.api}/v2/{self.registry.path}/manifests/{reference}"
        status, headers, body = self.get(url, {"Accept": ACCEPT}, MAX_MANIFEST_BYTES, "manifest")
        if status == 401 and self.authorization is None and self.authenticate(headers.get("www-authenticate", "")):
            status, headers, body = self.get(url, {"Accept": ACCEPT}, MAX_MANIFEST_BYTES, "manifest")
        if status == 404:
            raise BadInput(
                f"{self.what}: the registry {self.registry.host} has no such image (HTTP 404 for "
                f"{self.registry.path}:{reference}). Check the image's name and tag in the profile, or push it first."
            )
        if status in (401, 403):
            raise LabctlError(self.refused(status))
        if status != 200:
            raise LabctlError(
                f"{self.what}: the registry {self.registry.host} answered HTTP {status} for its manifest."
            )
        actual = "sha256:" + hashlib.sha256(body).hexdigest()
        said = headers.get("docker-content-digest")
        if said is not None and said != actual:
            raise LabctlError(
                f"{self.what}: the registry {self.registry.host} said the manifest is {said[:80]!r} but sent one that "
                f"hashes to {actual}; refusing an answer that does not match its digest."
            )
        if expected is not None and expected != actual:
            raise LabctlError(
                f"{self.what}: asked the registry {self.registry.host} for {expected} and got a manifest that hashes "
                f"to {actual}; refusing it."
            )
        try:
            parsed = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            parsed = None
        if not isinstance(parsed, dict):
            raise LabctlError(
                f"{self.what}: the registry {self.registry.host} sent a manifest that is not a JSON object."
            )
        return actual, parsed

    def refused(self, status: int) -> str:
        host = self.registry.host
        if self.login is None:
            return (
                f"{self.what}: the registry {host} refused anonymous access (HTTP {status}) and Docker has no login "
                f"for it: run `docker login {host}` (labctl uses the logins in {config_path()} and its credential "
                "helpers), then again."
            )
        return (
            f"{self.what}: the registry {host} refused the login Docker has for it (user {self.login.username!r}, "
            f"from {self.login.source}; HTTP {status}): run `docker login {host}` again, or ask for pull access to "
            f"{self.registry.path}."
        )

    def get(self, url: str, headers: dict[str, str], limit: int, what: str) -> tuple[int, httpx.Headers, bytes]:
        if self.authorization:
            headers = {**headers, "Authorization": self.authorization}
        try:
            with self.client.stream("GET", url, headers=headers) as response:
                declared = response.headers.get("content-length", "0")
                if declared.isdigit() and int(declared) > limit:
                    raise self.oversize(what, limit)
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > limit:
                        raise self.oversize(what, limit)
                return response.status_code, response.headers, bytes(body)
        except httpx.HTTPError as exc:
            raise LabctlError(
                f"{self.what}: the registry {self.registry.host} does not answer at {self.registry.api} "
                f"({type(exc).__name__}: {str(exc)[:120] or 'no detail'}). Check the image's registry in the profile, "
                "or start it (127.0.0.1:5000: `make docker-lab`)."
            ) from None

    def oversize(self, what: str, limit: int) -> LabctlError:
        return LabctlError(
            f"{self.what}: the registry {self.registry.host} sent a {what} larger than {limit // 1024} KiB; refusing it."
        )

    def authenticate(self, challenge: str) -> bool:
        """After a 401: Basic with Docker's login for this registry, or the token flow (a Bearer challenge names a
        realm that hands out a pull token; Docker's login, if any, is shown to it). False when nothing applies."""
        scheme, _, params = challenge.partition(" ")
        self.login = login_for(self.registry.host)
        if scheme.lower() == "basic":
            if self.login is None:
                return False
            pair = f"{self.login.username}:{self.login.secret}".encode()
            self.authorization = "Basic " + base64.b64encode(pair).decode()
            return True
        if scheme.lower() != "bearer":
            return False
        fields = dict(_CHALLENGE.findall(params))
        realm = fields.get("realm", "")
        try:
            realm_url = httpx.URL(realm)
        except httpx.InvalidURL:
            return False
        local = plain_http_allowed(realm_url.host or "", frozenset(), ())
        if realm_url.scheme != "https" and not (realm_url.scheme == "http" and local):
            raise LabctlError(
                f"{self.what}: the registry {self.registry.host} asks for a token from {realm[:100]!r}, which is not "
                "https; refusing to follow it."
            )
        query = {"scope": f"repository:{self.registry.path}:pull"}
        if "service" in fields:
            query["service"] = fields["service"]
        basic = {}
        if self.login is not None:
            pair = f"{self.login.username}:{self.login.secret}".encode()
            basic = {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        status, _headers, body = self.get(str(realm_url.copy_merge_params(query)), basic, MAX_TOKEN_BYTES, "token")
        if status != 200:
            return False
        try:
            answer = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return False
        token = answer.get("token") or answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_BYTES:
            return False
        self.authorization = f"Bearer {token}"
        return True
