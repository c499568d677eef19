"""Crash cells on the qemu backend: ``crash.mode: power-cut`` (QEMU killed after_s into the measured
part, then a second VM recovers on the same data disk files).

Without a VM: the preflight refusals, the power cut itself on a stand-in for QEMU (a shell that
prints the marker to its "console"), and the recover phase's job. With a VM:
tests/vm/test_crash_vm.py.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from fsmatrix.agent import crash, guest
from fsmatrix.agent.workloads.pgbench import acks as pgacks
from fsmatrix.agent.workloads.pgbench import recover as pgrecover
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.libvirt import LibvirtBackend
from fsmatrix.backends.qemu.backend import QemuBackend
from fsmatrix.backends.qemu.crash_host import Cut, Launch
from fsmatrix.backends.qemu.power_cut import acknowledged_on as acknowledged_commits
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell, expand_document

PGBENCH = {"scale": 1, "clients": 2, "threads": 2, "duration": 30}
THREEN1 = {"start": 1, "end": 300000, "workers": 2, "block": 1000, "keys": "integer"}


def _crash_cell(mode: str = "power-cut", after_s: float = 3, workload: str = "threen1") -> MatrixCell:
    params = THREEN1 if workload == "threen1" else {}
    doc = {
        "include": [
            {
                "filesystem": "ext4",
                "gtm": {"journal": "before", "global_buffers": 4096},
                "workload": {workload: params},
                "crash": {"mode": mode, "after_s": after_s},
            }
        ],
        "defaults": {"storage.disk_size": "1G", "timeout": 600},
    }
    return expand_document(doc, "c").cells[0]


def _pgbench_cell(after_s: float = 5, **postgres: object) -> MatrixCell:
    """A small pgbench power-cut cell (TCG is slow)."""
    doc = {
        "include": [
            {
                "filesystem": "ext4",
                "workload": {"pgbench": PGBENCH},
                "crash": {"mode": "power-cut", "after_s": after_s},
                **({"postgres": postgres} if postgres else {}),
            }
        ],
        "defaults": {"storage.disk_size": "1G", "timeout": 900},
    }
    return expand_document(doc, "c").cells[0]


# --------------------------------------------------------------------------------------------
# without a VM


def test_libvirt_refuses_power_cut_at_preflight(tmp_path: Path) -> None:
    cell = _crash_cell("power-cut")
    with pytest.raises(UserError, match=rf"^cell {cell.id}: crash.mode 'power-cut' is not built yet on the libvirt"):
        LibvirtBackend(workdir=tmp_path).preflight([cell])


def _fake_qemu(backend: QemuBackend, script: str, tmp_path: Path) -> Launch:
    """A launch whose "QEMU" is ``sh -c script`` writing to the console file $1."""
    cell = _crash_cell()
    console = tmp_path / "console.log"
    backend.command = lambda launch, qmp: ["sh", "-c", script, "fake-qemu", str(console)]  # type: ignore[method-assign]
    return Launch(cell, 1, tmp_path, tmp_path / "o.qcow2", tmp_path / "j.img", [], console)


def test_power_cut_kills_qemu_after_s_after_the_marker(tmp_path: Path) -> None:
    backend = QemuBackend(workdir=tmp_path)
    # Boots for a second, prints the marker, then would run for a minute.
    launch = _fake_qemu(backend, f'sleep 1; echo "x {crash.MEASURE_START_MARKER}" >> "$1"; exec sleep 60', tmp_path)
    cut = Cut(1.5)
    started = time.monotonic()
    code = backend.boot_and_wait(launch, limit=30, cut=cut)
    took = time.monotonic() - started
    assert code == -9  # SIGKILL: no quit, no flush
    assert cut.fired_at_s is not None and 1.5 <= cut.fired_at_s < 2.0
    assert 2.5 <= took < 10  # not the fake's 61 s: it was cut


def test_no_marker_no_cut_and_a_guest_that_ends_first_is_not_cut(tmp_path: Path) -> None:
    backend = QemuBackend(workdir=tmp_path)
    launch = _fake_qemu(backend, f'echo "{crash.MEASURE_START_MARKER}" >> "$1"; sleep 0.5; exit 0', tmp_path)
    cut = Cut(5)
    assert backend.boot_and_wait(launch, limit=30, cut=cut) == 0
    assert cut.fired_at_s is None
    # Without a cut (every other cell) the marker means nothing.
    launch = _fake_qemu(backend, f'echo "{crash.MEASURE_START_MARKER}" >> "$1"; sleep 1; exit 0', tmp_path)
    assert backend.boot_and_wait(launch, limit=30) == 0


def test_ctrl_c_while_waiting_for_the_cut_leaves_no_qemu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = QemuBackend(workdir=tmp_path)
    launch = _fake_qemu(backend, f'echo "{crash.MEASURE_START_MARKER}" >> "$1"; exec sleep 60', tmp_path)
    cut = Cut(30)
    spawned: list[subprocess.Popen[bytes]] = []
    real_popen, real_sleep = subprocess.Popen, time.sleep

    def popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        spawned.append(real_popen(*args, **kwargs))  # type: ignore[call-overload]
        return spawned[-1]

    def interrupt(seconds: float) -> None:
        if launch.console.exists() and crash.MEASURE_START_MARKER in launch.console.read_text():
            raise KeyboardInterrupt  # as Ctrl-C would, in the wait loop
        real_sleep(0.05)

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(time, "sleep", interrupt)
    with pytest.raises(KeyboardInterrupt):
        backend.boot_and_wait(launch, limit=30, cut=cut)
    monkeypatch.undo()
    assert spawned and spawned[0].poll() is not None  # killed and reaped on the way out
    assert cut.fired_at_s is None


def test_recover_job_parses_as_the_guest_reads_it(tmp_path: Path) -> None:
    """The second VM's job: the first one's, with phase recover and the host's record of the cut."""
    backend = QemuBackend(workdir=tmp_path)
    cell = _crash_cell()
    data = [Disk(tmp_path / "d0.img", "fsm-data0")]
    doc = backend.job_document(cell, 1, data, {"cpus": 2})
    record = {"mode": "power-cut", "after_s": 3, "fired": True, "fired_at_s": 3.01, "measured_s": 3.01}
    parsed = guest.parse_job(json.loads(json.dumps({**doc, "phase": "recover", "crash": record})))
    assert parsed["phase"] == "recover" and parsed["data_serials"] == ["fsm-data0"]
    event = crash.CrashEvent.from_dict(parsed["crash"])
    assert event.fired and event.fired_at_s == 3.01 and event.mode == "power-cut"
    with pytest.raises(guest.JobError, match="phase 'recover' needs"):
        guest.parse_job({**doc, "phase": "recover"})  # without the record of the crash


def test_acknowledged_commits_only_for_pgbench() -> None:
    assert acknowledged_commits(_crash_cell(), "FSMATRIX-ACK 5\n") is None


def test_acknowledged_commits_reads_the_lines_the_guest_tags() -> None:
    """The guest tags its lines with ack_tag(cell): the host must count those, and only those
    (an untagged read counted 0 and made every durability check vacuous)."""
    cell = _pgbench_cell()
    tag = pgrecover.ack_tag(cell.spec)  # what the guest computes from the job's cell
    console = b"".join(pgacks.ack_line(k, tag) for k in range(1, 8)).decode()
    console += "FSMATRIX-ACK 99\nFSMATRIX-ACK pgbench-000000000000 50\n"  # untagged, another cell's
    console += f"FSMATRIX-ACK {tag} 8"  # cut short by the power cut: no newline, not counted
    assert acknowledged_commits(cell, console) == 7
    assert acknowledged_commits(cell, "booting...\n") == 0
