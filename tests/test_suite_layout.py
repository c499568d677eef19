"""The test tree itself: test-module basenames are unique (modules import each other's helpers by
basename, `from test_libvirt import _cell`) and every folder of test modules is on pytest's
pythonpath and in ruff's src (pyproject.toml)."""

from __future__ import annotations

import tomllib
from collections import Counter

from conftest import REPO

TESTS = REPO / "tests"
MODULES = sorted(p for p in TESTS.rglob("test_*.py") if "data" not in p.relative_to(TESTS).parts)
FOLDERS = sorted({str(p.parent.relative_to(REPO)) for p in MODULES} | {"tests"})
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_module_basenames_are_unique() -> None:
    names = Counter(p.name for p in MODULES)
    assert [name for name, n in names.items() if n > 1] == []


def test_every_test_folder_is_on_the_path() -> None:
    assert sorted(PYPROJECT["tool"]["pytest"]["ini_options"]["pythonpath"]) == FOLDERS
    assert sorted(PYPROJECT["tool"]["ruff"]["src"]) == sorted([*FOLDERS, "runner"])
