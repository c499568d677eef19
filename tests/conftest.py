"""Shared fixtures. Tests use the real tools: GT.M, mkfs, mount, losetup, sysbench, fio."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from fsmatrix.agent.storage import loop as loop_module
from fsmatrix.agent.storage.devices import read_mounts
from fsmatrix.backends.qemu.process import running_vms
from fsmatrix.results.store import Result

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
TEST_DATA = Path(__file__).resolve().parent / "data"  # captured tool output and other test data, tests/data/

# A shell without job control starts background commands with SIGINT ignored, and an ignored signal
# stays ignored across exec: the Ctrl-C tests' children would then never see their SIGINT. Python
# keeps an inherited SIG_IGN, so put the default back for this process and so for every child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def typed(docs: Iterable[Mapping[str, Any] | Result]) -> list[Result]:
    """Result documents a test made in memory, typed as the store types every document it reads (a
    result already typed, e.g. read back from disk, as it is)."""
    return [doc if isinstance(doc, Result) else Result.read(doc) for doc in docs]


def attached_under(directory: Path) -> list[str]:
    """Loop devices whose backing file lies under ``directory`` (one another test detaches while this
    reads it is gone: ENODEV or ENOENT, not attached), but those only another mount namespace holds
    (``held_elsewhere``)."""
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            text = backing.read_text()
        except OSError:
            continue
        name = backing.parent.parent.name
        if text.strip().startswith(str(directory)) and not held_elsewhere(name):
            found.append(name)
    return found


def held_elsewhere(name: str) -> bool:
    """A loop device our detach turned into autoclear because a mount in another mount namespace still
    holds it: a test running beside this one (podman, act, unshare) made a namespace while the device was
    mounted here, and its copy of the mount lives until that process ends; the kernel detaches the device
    then. Cleaned up as far as this process can: not a leak of the test's own (a CI-like run's flake)."""
    block = Path("/sys/block") / name
    try:
        autoclear = (block / "loop" / "autoclear").read_text().strip() == "1"
        dev = (block / "dev").read_text().strip()
        ours = os.readlink("/proc/self/ns/mnt")
    except OSError:
        return False
    if not autoclear:
        return False
    for mountinfo in Path("/proc").glob("[0-9]*/mountinfo"):
        try:
            elsewhere = os.readlink(mountinfo.parent / "ns" / "mnt") != ours
            lines = mountinfo.read_text().splitlines() if elsewhere else []
        except OSError:
            continue
        if any(line.split()[2] == dev for line in lines if len(line.split()) > 2):
            return True
    return False


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


def gtm_ipc(dat: Path) -> set[tuple[str, str]]:
    """The System V semaphore and shared memory that the GT.M database file ``dat`` names in its header
    (``mupip ftok``) and that exist now: one database's IPC, whatever other GT.M runs beside the test
    (the machine's whole IPC, before and after, fails then). After a rundown its header names none."""
    from fsmatrix.agent.databases import gtm

    where = dat.parent
    db = gtm.Database(gtm.locate_dist(), dat.with_suffix(".gld"), dat, None, where, where, where, gtm.Settings())
    sem, shm = gtm.ipc_ids(db)
    return {("sem", str(sem)), ("shm", str(shm))} & sysv_ipc_ids()


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


def invoke(*args: str, env: Mapping[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """`fsmatrix ARGS` in this process (click's CliRunner), its exit status, stdout and stderr as a
    subprocess's would be: for tests of what a command says, without a new interpreter's imports each
    time. A test of the process itself (signals, exit paths, the installed command) runs ``FSMATRIX``.
    An exception that would have been a traceback is raised here, so the test fails on it. What the
    command line sets for its process (the SIGTERM handler, a store URL taken from the environment)
    is put back afterwards."""
    from click.testing import CliRunner

    from fsmatrix import cli
    from fsmatrix.results.store import url as store_url

    taken, on_sigterm = list(store_url._taken), signal.getsignal(signal.SIGTERM)
    try:
        done = CliRunner().invoke(cli.main, list(args), env=env, catch_exceptions=True)
    finally:
        store_url._taken[:] = taken
        signal.signal(signal.SIGTERM, on_sigterm)
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise done.exception
    return subprocess.CompletedProcess([*FSMATRIX, *args], done.exit_code, done.stdout, done.stderr)


IMAGE_TEST_TIMEOUT = 3600  # includes building the guest image when it is not cached


def run_on_qemu(
    matrix: Path, results: Path, workdir: Path, timeout: float = IMAGE_TEST_TIMEOUT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`fsmatrix run MATRIX --backend qemu --no-race`, its output captured; the caller judges the outcome.
    The matrix's fixed repeats: a comparison group would race by default, 3 runs a cell or more under TCG."""
    where = ["--results", str(results), "--workdir", str(workdir)]
    return subprocess.run(
        [*FSMATRIX, "run", str(matrix), "--backend", "qemu", *where, "--no-race"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A run's --workdir (VM tests, host runs, the container's): on /var/tmp, since cache=none and loop
    files open the disks with O_DIRECT, which a tmpfs /tmp refuses. A module may define a workdir
    fixture of its own (test_pgbench's checks that nothing is left under it)."""
    with tempfile.TemporaryDirectory(prefix="fsm-", dir="/var/tmp") as d:
        yield Path(d)


# The marker ``root`` (pyproject.toml): a test that has it is skipped unless it runs as root, with
# the marker's reason. `@needs_root`, `pytestmark = needs_root` or `pytest.mark.root(reason=...)`.
needs_root = pytest.mark.root(reason="needs root: losetup, mkfs and mount")

VM_TESTS = Path(__file__).resolve().parent / "vm"

# Tests that share the machine (loop devices, mounts, cgroups, swap, /var/tmp/fsmatrix, VMs): under
# pytest-xdist's `--dist loadgroup` they all go to one worker, one at a time, while the other workers
# run the tests that touch only their own temporary files (Makefile: check, test).
MACHINE_MARKS = ("root", "system", "image")
MACHINE_GROUP = "machine"


def shares_the_machine(node: pytest.Item) -> bool:
    return any(node.get_closest_marker(mark) for mark in MACHINE_MARKS)


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/vm/ boots a guest: it gets the marker ``image``. A test marked ``image``
    anywhere else is refused: it belongs under tests/vm/. A test marked ``root`` is skipped unless
    this is root. Tests marked root, system or image share the machine: they run on one worker, in turn."""
    misplaced = []
    for item in items:
        if item.path.is_relative_to(VM_TESTS):
            item.add_marker(pytest.mark.image)
        elif item.get_closest_marker("image"):
            misplaced.append(item.nodeid)
        root = item.get_closest_marker("root")
        if root is not None and os.geteuid() != 0:
            item.add_marker(pytest.mark.skip(reason=root.kwargs.get("reason", "needs root")))
        if shares_the_machine(item):
            item.add_marker(pytest.mark.xdist_group(MACHINE_GROUP))
    if misplaced:
        raise pytest.UsageError("tests that boot a guest belong under tests/vm/: " + ", ".join(misplaced))


@pytest.fixture(autouse=True)
def _only_the_machine_group_attaches_loops(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test outside the group ``machine`` runs beside the machine's tests: attaching a loop device
    (``storage.loop_devices``, the host backend) fails it with what to do, rather than racing them.
    Patched by hand, not with ``monkeypatch``: an autouse fixture is set up first and torn down last,
    and a test's own monkeypatching must be undone before its loop devices are detached."""
    if shares_the_machine(request.node):
        yield
        return

    def refuse(image: Path) -> str:
        raise AssertionError(
            f"{request.node.nodeid} attaches a loop device ({image}): it shares the machine; mark it root (needs_root)"
        )

    attach, loop_module.attach = loop_module.attach, refuse
    try:
        yield
    finally:
        loop_module.attach = attach


@pytest.fixture
def write_matrix(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write a matrix file and return its path."""

    def write(text: str, name: str = "m.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


# --------------------------------------------------------------------------------------------
# golden files: a parser of tool output on captured output


def as_json(value: Any) -> Any:
    """``value`` (a parser's answer) as JSON would hold it: dataclasses as objects, tuples as lists,
    sets as sorted lists, paths as strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(as_json(v) for v in value)
    if isinstance(value, Path):
        return str(value)
    return value


def _literal(text: str) -> str:
    """A regular expression matching ``text``, readable: only the characters regular expressions use
    are escaped (re.escape escapes spaces too)."""
    return re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", text)


@dataclasses.dataclass(frozen=True)
class Golden:
    """One case of a parser's golden files in tests/data/<tool>/: ``<case>.<ext>``, the tool's output
    as captured, and ``<case>.expected.json``, what the parser must make of it: its answer as JSON
    (``as_json``), or ``{"raises": "ValueError", "match": "regex"}`` when it must refuse the capture.

    FSMATRIX_UPDATE_GOLDEN=1 writes the expected files from the parser instead (the test is then
    skipped, saying so): read what it wrote before committing it."""

    capture: Path

    @property
    def expected(self) -> Path:
        return self.capture.with_name(self.capture.stem + ".expected.json")

    def check(self, parse: Callable[[str], object]) -> None:
        text = self.capture.read_text(encoding="utf-8")
        if os.environ.get("FSMATRIX_UPDATE_GOLDEN") == "1":
            try:
                answer = as_json(parse(text))
            except Exception as e:  # the refusal is the answer
                answer = {"raises": type(e).__name__, "match": _literal((str(e).splitlines() or [""])[0])}
            self.expected.write_text(json.dumps(answer, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            pytest.skip(f"wrote {self.expected.relative_to(TEST_DATA)}: read it before committing it")
        if not self.expected.exists():
            pytest.fail(f"{self.expected} is missing: write it with FSMATRIX_UPDATE_GOLDEN=1 and read it")
        expected = json.loads(self.expected.read_text(encoding="utf-8"))
        if isinstance(expected, dict) and set(expected) == {"raises", "match"}:
            with pytest.raises(Exception) as refused:  # its type is checked below
                answer = parse(text)
                pytest.fail(f"{self.capture.name}: expected {expected['raises']}, parsed {answer!r}")
            assert expected["raises"] in [t.__name__ for t in type(refused.value).__mro__], refused.value
            assert re.search(expected["match"], str(refused.value)), str(refused.value)
            return
        answer = as_json(parse(text))
        assert answer == expected
        # Equal values can still differ in type (2 == 2.0): the JSON text must be the same too.
        assert json.dumps(answer, sort_keys=True) == json.dumps(expected, sort_keys=True)


def golden_cases(folder: str) -> list[Any]:
    """The golden cases in tests/data/``folder``/ (one parser's), as parameters named by case. Every
    capture is a case; an expected file without its capture is an error."""
    directory = TEST_DATA / folder
    files = sorted(p for p in directory.iterdir() if p.is_file())
    captures = [p for p in files if not p.name.endswith(".expected.json")]
    orphans = sorted({p.name for p in files} - {Golden(c).expected.name for c in captures} - {c.name for c in captures})
    if not captures or orphans:
        raise ValueError(f"{directory}: no captures" if not captures else f"{directory}: no capture for {orphans}")
    return [pytest.param(Golden(c), id=c.stem) for c in captures]
