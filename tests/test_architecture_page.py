"""The architecture page cannot drift: its package and module list is generated from the code, and every module
or folder its hand-written parts name must exist."""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

from helpers.support import REPO

PAGE = REPO / "docs" / "development" / "architecture.md"
PY_NAME = re.compile(r"`([\w./-]+\.py)`")
FOLDER = re.compile(r"`(labctl/[\w/]+/)`")


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("architecture_page", REPO / "scripts" / "architecture_page.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def python_files() -> list[str]:
    return [p.relative_to(REPO).as_posix() for p in REPO.rglob("*.py") if not {".venv", "build", ".git"} & set(p.parts)]


def test_the_generated_part_is_up_to_date() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert generator().page_with_section(page) == page, "docs/development/architecture.md is stale: make architecture"


def test_every_module_of_the_package_is_on_the_page() -> None:
    page = PAGE.read_text(encoding="utf-8")
    missing = [
        rel
        for rel in python_files()
        if rel.startswith("labctl/")
        and rel.rsplit("/", 1)[-1] != "__init__.py"
        and f"`{rel.rsplit('/', 1)[-1]}`" not in page
    ]
    assert missing == []


def test_the_page_names_no_module_or_folder_that_does_not_exist() -> None:
    page = PAGE.read_text(encoding="utf-8")
    files = python_files()
    unknown = [
        name for name in set(PY_NAME.findall(page)) if not any(f == name or f.endswith("/" + name) for f in files)
    ]
    unknown += [name for name in set(FOLDER.findall(page)) if not (REPO / name).is_dir()]
    assert sorted(unknown) == []
