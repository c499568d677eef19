"""The test tree itself: test-module basenames are unique (modules import each other's helpers by
basename, `from test_libvirt import _cell`) and every folder of test modules is on pytest's
pythonpath and in ruff's src (pyproject.toml); `make check` and `make test` run the tests that share
the machine on one worker, in turn, and the rest beside them."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO
from fsmatrix.agent import storage

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


SAMPLE = """
import os, pathlib, pytest

def _note(kind):
    with open(pathlib.Path(os.environ["WORKERS_FILE"]), "a") as f:
        f.write(f"{kind} {os.environ.get('PYTEST_XDIST_WORKER', 'none')}\\n")

@pytest.mark.parametrize("i", range(6))
@pytest.mark.system
def test_shares_the_machine(i):
    _note("machine")

@pytest.mark.parametrize("i", range(12))
def test_own_files(i):
    _note("own")
"""


def _workers(tmp_path: Path, dist: str) -> dict[str, set[str]]:
    """Which xdist workers ran the sample's machine tests and its own-files tests, under tests/conftest.py."""
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    record = tmp_path / "workers.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", "-n", "2", "--dist", dist,
         "-m", "system or not system", "test_sample.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "WORKERS_FILE": str(record), "PYTHONPATH": str(TESTS)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    seen: dict[str, set[str]] = {"machine": set(), "own": set()}
    for line in record.read_text().splitlines():
        kind, worker = line.split()
        seen[kind].add(worker)
    return seen


def test_the_tests_that_share_the_machine_run_on_one_worker(tmp_path: Path) -> None:
    """`make check` and `make test` run one pytest on two workers, `--dist loadgroup`: the tests
    marked root, system or image (tests/conftest.py: MACHINE_MARKS) all on one, in turn. Fails if
    pytest and pytest-xdist stop honouring the group (pytest 9.2 with xdist 3.8 did: pyproject.toml)."""
    seen = _workers(tmp_path, "loadgroup")
    assert len(seen["machine"]) == 1 and seen["own"] <= {"gw0", "gw1"}, seen


def test_without_the_group_the_check_sees_them_spread(tmp_path: Path) -> None:
    """The check above can fail: under plain `--dist load` the machine tests go to both workers."""
    seen = _workers(tmp_path, "load")
    assert len(seen["machine"]) == 2, seen


def test_check_and_test_run_one_pytest_with_the_machine_group() -> None:
    for target in ("check", "test"):
        (line,) = _recipe(target)
        assert line.startswith("$(BIN)/pytest -n 2 --dist loadgroup"), (target, line)
    assert '-m "$(CHECK_MARKS)"' in _recipe("check")[0]
    marks = next(line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith("CHECK_MARKS"))
    assert marks.split(":=")[1].strip() == "not slow and not image and not system"


def test_a_test_outside_the_machine_group_cannot_attach_a_loop_device(tmp_path: Path) -> None:
    """conftest's guard: this test is not marked root, so it runs beside the machine's tests."""
    with (
        pytest.raises(AssertionError, match="it shares the machine; mark it root"),
        storage.loop_devices(1, 1, tmp_path),
    ):
        pass
    assert list(tmp_path.iterdir()) == []  # the image file made before the refusal is gone
