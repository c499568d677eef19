"""Shared fixtures. Tests use the real tools: GT.M, mkfs, mount, losetup, sysbench, fio."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsmatrix.agent.storage.devices import read_mounts
from fsmatrix.backends.qemu.backend import running_vms

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
TEST_DATA = Path(__file__).resolve().parent / "data"  # captured tool output and other test data, tests/data/

# A shell without job control starts background commands with SIGINT ignored, and an ignored signal
# stays ignored across exec: the Ctrl-C tests' children would then never see their SIGINT. Python
# keeps an inherited SIG_IGN, so put the default back for this process and so for every child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def attached_under(directory: Path) -> list[str]:
    """Loop devices whose backing file lies under ``directory``."""
    return [
        backing.parent.parent.name
        for backing in Path("/sys/block").glob("loop*/loop/backing_file")
        if backing.read_text().strip().startswith(str(directory))
    ]


def mounted_under(directory: Path) -> list[str]:
    """Mount points under ``directory``."""
    return [m.mount_point for m in read_mounts() if m.mount_point.startswith(str(directory))]


def sysv_ipc_ids() -> set[tuple[str, str]]:
    """Every System V shared memory segment and semaphore set on the machine (GT.M uses both)."""
    ids = set()
    for kind in ("shm", "sem"):
        for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]:
            ids.add((kind, line.split()[1]))
    return ids


def vms_under(directory: Path) -> list[tuple[int, str]]:
    """fsmatrix QEMU processes (pid, name) still running on disks under ``directory``."""
    found = []
    for pid, name in running_vms():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if str(directory) in cmdline:
            found.append((pid, name))
    return found


FSMATRIX = [sys.executable, "-m", "fsmatrix"]
IMAGE_TEST_TIMEOUT = 3600  # includes building the guest image when it is not cached


def run_on_qemu(
    matrix: Path, results: Path, workdir: Path, timeout: float = IMAGE_TEST_TIMEOUT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`fsmatrix run MATRIX --backend qemu`, its output captured; the caller judges the outcome."""
    return subprocess.run(
        [*FSMATRIX, "run", str(matrix), "--backend", "qemu", "--results", str(results), "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A run's --workdir for VM tests: on /var/tmp, since cache=none opens the disks with O_DIRECT,
    which a tmpfs /tmp refuses. A module may define a workdir fixture of its own."""
    with tempfile.TemporaryDirectory(prefix="fsm-", dir="/var/tmp") as d:
        yield Path(d)


# The marker ``root`` (pyproject.toml): a test that has it is skipped unless it runs as root, with
# the marker's reason. `@needs_root`, `pytestmark = needs_root` or `pytest.mark.root(reason=...)`.
needs_root = pytest.mark.root(reason="needs root: losetup, mkfs and mount")

VM_TESTS = Path(__file__).resolve().parent / "vm"


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/vm/ boots a guest: it gets the marker ``image``. A test marked ``image``
    anywhere else is refused: it belongs under tests/vm/. A test marked ``root`` is skipped unless
    this is root."""
    misplaced = []
    for item in items:
        if item.path.is_relative_to(VM_TESTS):
            item.add_marker(pytest.mark.image)
        elif item.get_closest_marker("image"):
            misplaced.append(item.nodeid)
        root = item.get_closest_marker("root")
        if root is not None and os.geteuid() != 0:
            item.add_marker(pytest.mark.skip(reason=root.kwargs.get("reason", "needs root")))
    if misplaced:
        raise pytest.UsageError("tests that boot a guest belong under tests/vm/: " + ", ".join(misplaced))


@pytest.fixture
def write_matrix(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write a matrix file and return its path."""

    def write(text: str, name: str = "m.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
