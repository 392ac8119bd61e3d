"""The wheel carries the lab that ships with labctl: at build time the checkout's lab folders are copied into
the package as `labctl/_lab/` (labctl.catalog.lab.shipped_lab finds them there), so git holds one copy. An
editable install copies nothing: there the checkout itself is the lab. The metadata is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
LAB_FOLDERS = ("engines", "templates", "workloads", "suites", "studies")  # = labctl.catalog.lab.LAB_FOLDERS (a test checks)


class BuildPyWithLab(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "labctl" / "_lab"
        shutil.rmtree(target, ignore_errors=True)  # a folder removed from the checkout leaves no stale copy
        for name in LAB_FOLDERS:
            shutil.copytree(
                HERE / name, target / name, symlinks=False, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )


setup(cmdclass={"build_py": BuildPyWithLab})
