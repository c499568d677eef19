"""Adding a workload, a filesystem or a crash mode is one new module and one registry line: proved end to end.

A copy of the fsmatrix package gets a new workload module (``filecount``: write N files, fsync,
read them back) and a new filesystem module (``ramfs``, which the host kernel has and fsmatrix does
not declare), each registered with one added line and nothing else. Both then appear in
``fsmatrix matrix settings``, expand into cells, run on the host backend (real mounts) and show up
in the report; the workload also gets its standalone ``fsmatrix workload filecount`` command.
A new crash mode (``nothing``: kills nothing, then recovers at the end of the run) runs a 3n+1 crash
cell through the host backend, its recovery hook included; its host side (one module in
``backends/qemu/``, one line in ``host_sides.py``: an extra disk, twice the timeout, a job hook) goes
through the qemu backend's preflight and what it gives a run's VM, without booting one.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.system  # a copy of the package, its commands in subprocesses, a host-backend run

WORKLOAD_MODULE = '''\
"""filecount: write N files of one size, fsync each, read them back (a test plugin)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import Metric, Outcome, Workload, Workspace
from fsmatrix.agent.declare import parse_size, setting


@dataclass(frozen=True)
class Params:
    files: int = setting(minimum=1, maximum=100000, cli=True, help="how many files")
    size: str = setting("4K", size=True, help="bytes per file")


def run_cell(cell: Cell, ws: Workspace, timeout: float) -> Outcome:
    p = cell.typed_params(Params)
    data = os.urandom(parse_size(p.size))
    paths = [ws.data / f"file{i}" for i in range(p.files)]
    t0 = time.monotonic()
    with ws.measure():
        for path in paths:
            with open(path, "wb") as f:
                f.write(data)
                os.fsync(f.fileno())
    elapsed = time.monotonic() - t0
    bad = [path.name for path in paths if path.read_bytes() != data]
    for path in paths:
        path.unlink()
    verification = {"status": "failed", "message": f"differ: {bad}"} if bad else {"status": "passed"}
    metrics = {"elapsed_s": round(elapsed, 6), "files": p.files, "files_per_s": round(p.files / elapsed, 1)}
    return Outcome(metrics=metrics, verification=verification)


WORKLOAD = Workload(
    name="filecount",
    help="write N files, fsync each, read them back",
    params=Params,
    run_cell=run_cell,
    metrics=(
        Metric("files_per_s", "Files written per second", "files/s", "higher"),
        Metric("elapsed_s", "Elapsed time (s)", "s", "lower"),
    ),
    primary="files_per_s",
    slug=lambda p: f"n{p.files}",
    summary=lambda p: f"filecount {p.files} x {p.size}",
    row_keys=("files",),
    operation="file written",
    operations=lambda m: m.get("files"),
)
'''

FILESYSTEM_MODULE = '''\
"""ramfs: memory-backed like tmpfs, without a size limit or swap (a test plugin)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fsmatrix.agent.storage.filesystems import Filesystem


def read_geometry(device: str | None, mount_point: Path | None = None) -> dict[str, Any]:
    assert mount_point is not None
    return {"block_size": os.statvfs(mount_point).f_bsize}


FILESYSTEM = Filesystem(
    name="ramfs",
    package=None,
    mkfs=(),
    kernel_module=None,
    read_geometry=read_geometry,
    device=False,
)
'''

CRASH_MODE_MODULE = '''\
"""nothing: crash nothing; when the run has ended, recover as if it had crashed then (a test plugin)."""

from __future__ import annotations

from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import Outcome, Workspace
from fsmatrix.agent.crash.mode import CrashMode, CrashRun


class NothingRun(CrashRun):
    def run(self, cell: Cell, workspace: Workspace, recover: bool) -> Outcome | None:
        cell.declaration.run_cell(cell, workspace, float(cell.timeout))
        self.event.fired, self.event.fired_at_s = True, self.event.measured_s  # a "crash" at the very end
        hook = cell.declaration.recover
        assert hook is not None
        return hook(cell, workspace, self.event) if recover else None


MODE = CrashMode(name="nothing", help="kill nothing; recover when the run has ended", start=NothingRun)
'''

CRASH_HOST_MODULE = '''\
"""The host side of nothing: one more disk, twice the cell's timeout, a hook in the job (a test plugin)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu.crash_host import HostCrashMode
from fsmatrix.matrix import MatrixCell


class NothingHost(HostCrashMode):
    mode = "nothing"

    def extra_disks(self, cell: MatrixCell, run_dir: Path, *, create: bool = False) -> list[Disk]:
        path = run_dir / "nothing.img"
        if create:
            path.write_bytes(bytes(4096))
        return [Disk(path, "fsm-nothing")]

    def timeouts(self, cell: MatrixCell) -> int:
        return 2

    def job_environment(self, cell: MatrixCell) -> dict[str, Any]:
        return {"nothing_hook": True}


HOST_SIDE = NothingHost()
'''

# Run in the plugged copy: the qemu backend's preflight (no image: _prepare stubbed) and what its run's VM gets.
QEMU_PREFLIGHT = """\
import sys
from pathlib import Path

from fsmatrix.backends.host import HostBackend
from fsmatrix.backends.libvirt import LibvirtBackend
from fsmatrix.backends.qemu.backend import QemuBackend
from fsmatrix.backends.qemu.crash_host import Launch
from fsmatrix.errors import UserError
from fsmatrix.matrix import load

work = Path(sys.argv[2])
(cell,) = load(sys.argv[1]).cells
backend = QemuBackend(workdir=work)
backend._prepare = lambda: None  # no image: preflight's refusals come before it
backend.preflight([cell])
assert backend.time_limit(cell) == 2 * cell.spec.timeout + backend.boot_allowance
launch = Launch(cell, 1, work, work / "o.qcow2", work / "j.img", [], work / "c.log")
assert backend.drives(launch)[-1].serial == "fsm-nothing"
assert backend.job_document(cell, 1, [], {})["environment"]["nothing_hook"] is True
HostBackend(workdir=work / "host").preflight([cell])
try:
    LibvirtBackend(workdir=work).preflight([cell])
except UserError as exc:
    assert "crash.mode 'nothing' is not built yet on the libvirt backend" in str(exc), exc
else:
    raise AssertionError("libvirt ran a mode with a host side")
print("ok")
"""

CRASH_MATRIX = """\
name: crash-plugin
axes:
  filesystem: [ext4]
  workload:
    - threen1: {start: 1, end: 20000, workers: 2, block: 1000}
defaults:
  storage.disk_size: 256M
  crash: {mode: nothing, after_s: 1}
"""

MATRIX = """\
name: plugins
axes:
  filesystem: [ramfs, tmpfs]
  workload:
    - filecount: {files: 20}
defaults:
  storage.disk_size: 64M
"""


def _add_line(path: Path, after: str, line: str) -> None:
    """Insert ``line`` after the line ``after``; check that exactly one line changed."""
    before = path.read_text().splitlines(keepends=True)
    index = before.index(after + "\n")
    after_lines = [*before[: index + 1], line + "\n", *before[index + 1 :]]
    path.write_text("".join(after_lines))
    changed = [
        d for d in difflib.unified_diff(before, after_lines, n=0) if d[:1] in "+-" and d[:3] not in ("+++", "---")
    ]
    assert changed == ["+" + line + "\n"]


@pytest.fixture(scope="module")
def plugged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of runner/fsmatrix with the plugins, each: one module plus one registry line."""
    root = tmp_path_factory.mktemp("plugged") / "runner"
    shutil.copytree(REPO / "runner" / "fsmatrix", root / "fsmatrix", ignore=shutil.ignore_patterns("__pycache__"))
    package = root / "fsmatrix" / "agent"
    (package / "workloads" / "filecount.py").write_text(WORKLOAD_MODULE)
    _add_line(package / "workloads" / "__init__.py", '    "fio",', '    "filecount",')
    (package / "storage" / "filesystems" / "ramfs.py").write_text(FILESYSTEM_MODULE)
    _add_line(package / "storage" / "filesystems" / "__init__.py", '    "raw",', '    "ramfs",')
    (package / "crash" / "nothing.py").write_text(CRASH_MODE_MODULE)
    _add_line(package / "crash" / "settings.py", '    "kill": "kill",', '    "nothing": "nothing",')
    qemu = root / "fsmatrix" / "backends" / "qemu"
    (qemu / "nothing.py").write_text(CRASH_HOST_MODULE)
    _add_line(qemu / "host_sides.py", '    "flush_points",', '    "nothing",')
    return root


def fsmatrix(plugged: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(plugged)}
    return subprocess.run(
        [sys.executable, "-m", "fsmatrix", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=900
    )


def test_the_copy_is_the_one_that_runs(plugged: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import fsmatrix; print(fsmatrix.__file__)"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(plugged)},
        check=True,
    ).stdout
    assert out.strip().startswith(str(plugged))


def test_plugins_appear_in_settings_and_expand(plugged: Path, tmp_path: Path) -> None:
    settings = fsmatrix(plugged, "matrix", "settings")
    assert settings.returncode == 0, settings.stderr
    assert "workload.filecount.files" in settings.stdout and "workload.filecount.size" in settings.stdout
    assert "ramfs" in settings.stdout
    matrix = tmp_path / "plugins.yaml"
    matrix.write_text(MATRIX)
    expanded = fsmatrix(plugged, "matrix", "expand", "--format", "json", str(matrix))
    assert expanded.returncode == 0, expanded.stderr
    assert "ramfs-filecount-n20-" in expanded.stdout and "tmpfs-filecount-n20-" in expanded.stdout
    # A bound the plugin declared is enforced with one clear line.
    matrix.write_text(MATRIX.replace("files: 20", "files: 0"))
    bad = fsmatrix(plugged, "matrix", "expand", str(matrix))
    assert bad.returncode == 2 and "workload.filecount.files" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.root(reason="the host backend mounts (root)")
def test_plugins_run_on_the_host_backend_and_show_in_the_report(plugged: Path, tmp_path: Path) -> None:
    matrix = tmp_path / "plugins.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "results"
    # --no-race: one run a cell (ramfs and tmpfs are a comparison group, which races by default)
    run = fsmatrix(
        plugged, "run", str(matrix), "--results", str(results), "--workdir", str(tmp_path / "work"), "--no-race"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = (results / "plugins" / "report.md").read_text()
    assert "## filecount" in report and "**Files written per second**" in report
    assert "ramfs-filecount-n20-" in report  # the runs table
    assert "| ramfs | tmpfs |" in report  # columns of the metric tables
    standalone = fsmatrix(plugged, "workload", "filecount", "5", "--size", "1K", "--dir", str(tmp_path / "d"), "--json")
    assert standalone.returncode == 0, standalone.stderr
    assert '"files": 5' in standalone.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="the host backend mounts (root)")
def test_a_crash_mode_plugin_runs_a_crash_cell_on_the_host_backend(plugged: Path, tmp_path: Path) -> None:
    matrix = tmp_path / "crash-plugin.yaml"
    matrix.write_text(CRASH_MATRIX)
    settings = fsmatrix(plugged, "matrix", "settings")
    assert settings.returncode == 0 and "nothing" in settings.stdout, settings.stderr
    results = tmp_path / "results"
    run = fsmatrix(plugged, "run", str(matrix), "--results", str(results), "--workdir", str(tmp_path / "work"))
    assert run.returncode == 0, run.stdout + run.stderr
    (doc,) = [json.loads(p.read_text()) for p in results.glob("crash-plugin/*/r*.json")]
    assert doc["status"] == "passed", doc.get("reason")
    assert doc["crash"]["mode"] == "nothing" and doc["crash"]["fired"]
    assert "mupip integ" in [s["name"] for s in doc["crash"]["steps"]]  # the workload's recover hook ran


def test_a_crash_mode_plugin_has_a_host_side_the_qemu_backend_asks(plugged: Path, tmp_path: Path) -> None:
    """The mode's host side, found through its registry line: the qemu backend's preflight accepts the
    cell and gives its VM the extra disk, the longer limit and the job hook; libvirt refuses it."""
    matrix = tmp_path / "crash-plugin.yaml"
    matrix.write_text(CRASH_MATRIX)
    done = subprocess.run(
        [sys.executable, "-c", QEMU_PREFLIGHT, str(matrix), str(tmp_path / "work")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(plugged)},
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
