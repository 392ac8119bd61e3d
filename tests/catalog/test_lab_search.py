"""Which lab a command uses: --lab, then LABCTL_LAB, then the current folder and its parents, then the default
lab `labctl init` recorded, then the read-only lab that ships with labctl. A place naming a folder that is not
a lab is an error, and every error lists where labctl looked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers.support import REPO

from labctl.catalog.lab import LAB_FOLDERS, Lab, Search, is_lab, search_lab, shipped_lab
from labctl.catalog.user_folders import config_file, config_text, data_folder, default_lab
from labctl.errors import BadInput
from labctl.run.records.store import home_dir


def make(folder: Path) -> Path:
    (folder / "engines").mkdir(parents=True)
    (folder / "templates").mkdir()
    return folder


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    found = {name: make(tmp_path / name) for name in ("option", "env", "parent", "default", "shipped")}
    found["cwd"] = found["parent"] / "deep" / "er"
    found["cwd"].mkdir(parents=True)
    found["nowhere"] = tmp_path / "nowhere"
    found["nowhere"].mkdir()
    found["config"] = tmp_path / "config.yaml"
    found["config"].write_text(config_text(found["default"]))
    return found


def search(places: dict[str, Path], *skip: str) -> Search:
    return Search(
        option=None if "option" in skip else str(places["option"]),
        env=None if "env" in skip else str(places["env"]),
        cwd=places["nowhere"] if "cwd" in skip else places["cwd"],
        config=places["config"],
        shipped=None if "shipped" in skip else places["shipped"],
    )


def test_the_places_in_order(places: dict[str, Path]) -> None:
    assert search_lab(search(places)) == Lab(places["option"])
    assert search_lab(search(places, "option")) == Lab(places["env"])
    assert search_lab(search(places, "option", "env")) == Lab(places["parent"])
    assert search_lab(search(places, "option", "env", "cwd")) == Lab(places["default"])
    places["config"].unlink()
    assert search_lab(search(places, "option", "env", "cwd")) == Lab(places["shipped"], packaged=True)


def test_the_shipped_lab_is_read_only_however_it_is_found(places: dict[str, Path]) -> None:
    found = search_lab(Search(option=str(places["shipped"]), shipped=places["shipped"]))
    assert found.packaged
    with pytest.raises(BadInput, match=r"read-only\. Make a lab of your own with `labctl init DIR`"):
        found.check_writable("labctl pin harness --profile smoke")
    checkout = search_lab(Search(option=str(places["shipped"]), shipped=places["shipped"], shipped_is_checkout=True))
    assert not checkout.packaged  # an editable install's checkout, found by name, is a lab like any other
    Lab(places["option"]).check_writable("labctl pin")


def test_a_named_folder_that_is_not_a_lab_is_an_error_not_a_fall_through(places: dict[str, Path]) -> None:
    for how, kwargs in (("--lab", {"option": str(places["nowhere"])}), ("LABCTL_LAB", {"env": str(places["nowhere"])})):
        with pytest.raises(BadInput) as caught:
            search_lab(Search(cwd=places["cwd"], config=places["config"], shipped=places["shipped"], **kwargs))
        assert str(caught.value).startswith(f"{how} {places['nowhere']} is not a lab folder")
        assert "labctl looked only there" in str(caught.value) and "\n" not in str(caught.value)


def test_a_stale_default_lab_names_the_places_looked_in(places: dict[str, Path]) -> None:
    gone = places["nowhere"] / "lab"
    places["config"].write_text(config_text(gone))
    with pytest.raises(BadInput) as caught:
        search_lab(search(places, "option", "env", "cwd"))
    text = str(caught.value)
    assert text.startswith(f"the default lab {gone} (recorded in {places['config']}) is not a lab folder")
    assert f"--lab and LABCTL_LAB (neither set), {places['nowhere']} and its parents" in text
    assert "\n" not in text


def test_nothing_found_lists_every_place(places: dict[str, Path]) -> None:
    places["config"].unlink()
    with pytest.raises(BadInput) as caught:
        search_lab(search(places, "option", "env", "cwd", "shipped"))
    assert str(caught.value) == (
        f"no lab folder found: labctl looked in --lab and LABCTL_LAB (neither set), {places['nowhere']} and its "
        f"parents, the default lab in {places['config']} (none recorded) and the lab that ships with labctl "
        "(missing from this install). Make a lab with `labctl init DIR`, or pass --lab DIR."
    )


def test_a_settings_file_labctl_cannot_read_is_named(places: dict[str, Path]) -> None:
    places["config"].write_text("lab: relative/path\n")
    with pytest.raises(BadInput, match=r"config\.yaml:1: lab: .*absolute path"):
        default_lab(places["config"])
    places["config"].write_text("labs: /x\n")
    with pytest.raises(BadInput, match=r"unknown field\. Did you mean 'lab'"):
        search_lab(search(places, "option", "env", "cwd"))


def test_runs_and_renders_of_the_shipped_lab_go_to_the_data_folder(
    places: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LABCTL_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    shipped = Lab(places["shipped"], packaged=True)
    assert home_dir(shipped) == data_folder() == tmp_path / "data" / "labctl"
    assert home_dir(shipped, str(tmp_path / "mine")) == tmp_path / "mine"
    assert home_dir(Lab(places["option"])) == places["option"]  # a lab of one's own keeps its runs
    assert shipped.compose_dir == places["shipped"] / "compose"
    assert shipped.rendering_into(tmp_path / "data" / "compose").compose_dir == tmp_path / "data" / "compose"


def test_user_folders_follow_xdg_and_ignore_relative_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative")  # the XDG rule: invalid, ignored
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert config_file() == tmp_path / ".config" / "labctl" / "config.yaml"
    assert data_folder() == tmp_path / ".local" / "share" / "labctl"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert config_file() == tmp_path / "cfg" / "labctl" / "config.yaml"


def test_an_odd_path_survives_the_settings_file(tmp_path: Path) -> None:
    odd = tmp_path / "a 'quoted' \"lab\": #1"
    (tmp_path / "config.yaml").write_text(config_text(odd))
    assert default_lab(tmp_path / "config.yaml") == odd


def test_the_wheel_copies_the_folders_the_library_expects() -> None:
    tree = ast.parse((REPO / "setup.py").read_text())
    copied = next(
        ast.literal_eval(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "LAB_FOLDERS" for t in node.targets)
    )
    assert copied == LAB_FOLDERS
    manifest = (REPO / "MANIFEST.in").read_text().split()
    assert all(name in manifest for name in LAB_FOLDERS)


def test_an_editable_install_ships_its_checkout() -> None:
    if (REPO / "labctl" / "_lab").exists():
        pytest.skip("labctl runs from a built tree here")
    assert shipped_lab() == (REPO, True) and is_lab(REPO)
