"""Docker's logins read as the docker CLI reads them: the spellings `docker login` stores a registry under, a
malformed login or helper name refused in one line, and the secret never in a Login's repr."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from labctl.errors import LabctlError
from labctl.host.images.logins import Login, login_for


def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: object) -> None:
    (tmp_path / "config.json").write_text(json.dumps(data))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))


def _auth(pair: str) -> dict[str, str]:
    return {"auth": base64.b64encode(pair.encode()).decode()}


def test_docker_hub_and_a_host_under_their_stored_spellings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _config(
        tmp_path,
        monkeypatch,
        {"auths": {"https://index.docker.io/v1/": _auth("hub:pw1"), "https://mirror.lab.example": _auth("me:pw:2")}},
    )
    assert login_for("docker.io") == Login("hub", "pw1", "config.json")
    assert login_for("mirror.lab.example") == Login("me", "pw:2", "config.json")  # a password may hold ':'
    assert login_for("nvcr.io") is None
    assert "pw1" not in repr(login_for("docker.io"))


def test_no_configuration_is_no_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "absent"))
    assert login_for("nvcr.io") is None


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"auths": {"nvcr.io": {"auth": "bm9jb2xvbg=="}}}, "is not user:password"),  # "nocolon"
        ({"auths": {"nvcr.io": {"auth": "%%%"}}}, "is not user:password"),
        ({"credHelpers": {"nvcr.io": "../../bin/sh"}}, "that is not a plain name"),
        ({"credHelpers": {"nvcr.io": "labctl-absent-helper"}}, "docker-credential-labctl-absent-helper"),
    ],
)
def test_a_bad_login_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: object, says: str) -> None:
    _config(tmp_path, monkeypatch, data)
    with pytest.raises(LabctlError, match=says) as caught:
        login_for("nvcr.io")
    assert "\n" not in str(caught.value)


def test_a_configuration_that_is_not_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config.json").write_text("{not json")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    with pytest.raises(LabctlError, match="is not valid JSON"):
        login_for("nvcr.io")
