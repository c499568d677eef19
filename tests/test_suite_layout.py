"""The test tree itself: test-module basenames are unique (modules import each other's helpers by
basename, `from test_libvirt import _cell`) and every folder of test modules is on pytest's
pythonpath and in ruff's src (pyproject.toml); `make check` runs the tests marked root in a serial
pass of their own and the rest on two workers."""

from __future__ import annotations

import itertools
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


def _recipe(target: str) -> list[str]:
    """The command lines of a Makefile target."""
    lines = (REPO / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    return [line.strip() for line in itertools.takewhile(lambda x: x.startswith("\t"), lines[start + 1 :])]


def test_check_runs_the_root_tests_alone_and_the_rest_on_two_workers() -> None:
    """Fails if a test needing root could run beside another (their loop devices, mounts, swap)."""
    parallel, serial = _recipe("check")
    assert "-n 2" in parallel and '-m "$(CHECK_MARKS) and not root"' in parallel
    assert "-n" not in serial.split() and '-m "$(CHECK_MARKS) and root"' in serial
    marks = next(line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith("CHECK_MARKS"))
    assert marks.split(":=")[1].strip() == "not slow and not image and not system"
    assert all(line.startswith("$(BIN)/pytest") for line in _recipe("test"))  # CI: one process
    assert not any("-n" in line.split() for line in _recipe("test"))
