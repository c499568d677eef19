"""``crash.mode: flush-points`` (fsmatrix.agent.crash.flush_points; the qemu backend's log and scratch disks).

Without a VM (this host's kernel has no device-mapper): the verdict of a point, the run's problems,
the refusals at preflight (host, libvirt) and their acceptance by qemu, the extra disks and time
limit the qemu backend gives such a cell, and a host run that cannot find the disks failing with
one clear line, leaving nothing behind. With a VM: tests/vm/test_flushpoints_vm.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import attached_under, mounted_under, needs_root
from fsmatrix.agent import crash, job
from fsmatrix.agent.contract import Outcome
from fsmatrix.agent.crash import flush_points as flushpoints
from fsmatrix.agent.storage import loop_devices
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.host import HostBackend
from fsmatrix.backends.libvirt import LibvirtBackend
from fsmatrix.backends.qemu import flush_points as host_side
from fsmatrix.backends.qemu.backend import QemuBackend
from fsmatrix.backends.qemu.crash_host import Launch
from fsmatrix.backends.qemu.flush_points import FLUSH_CORRUPT_ENV, FLUSH_LOG_BYTES_ENV
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell, expand_document


def _cell(mode: str = "flush-points", points: int = 10, disk_size: str = "512M") -> MatrixCell:
    doc = {
        "include": [
            {
                "filesystem": "ext4",
                "gtm": {"journal": "before", "global_buffers": 4096},
                "workload": {"threen1": {"start": 1, "end": 2000, "workers": 2, "block": 100, "keys": "integer"}},
                "crash": {"mode": mode, "after_s": 1, "points": points, "seed": 3},
            }
        ],
        "defaults": {"storage.disk_size": disk_size, "timeout": 300},
    }
    return expand_document(doc, "fp").cells[0]


def _event(steps: list[tuple[str, str]] = (), checks: list[tuple[str, bool]] = ()) -> crash.CrashEvent:  # type: ignore[assignment]
    event = crash.CrashEvent(mode="flush-points", after_s=1, fired=True)
    event.steps = [{"name": n, "seconds": 0.1, "status": s, "detail": f"{n} said so"} for n, s in steps]
    for name, passed in checks:
        event.check(name, passed, f"{name} {'fine' if passed else 'broken'}")
    return event


PASSED = Outcome(metrics={}, verification={"status": "passed", "message": "answers match"})


# --------------------------------------------------------------------------------------------
# verdicts


def test_a_point_passes_when_every_step_check_and_the_verification_pass() -> None:
    event = _event([("mupip journal -recover -backward", "ok")], [("mupip integ", True)])
    assert flushpoints.point_verdict(event, PASSED, None) == ("passed", "")


def test_work_reused_is_recorded_but_does_not_fail_a_point() -> None:
    """An early point legitimately finds little work done: how much survived is no verdict."""
    event = _event([("survey", "ok")], [("work reused", False)])
    assert flushpoints.point_verdict(event, PASSED, None) == ("passed", "")


@pytest.mark.parametrize(
    ("steps", "checks", "outcome", "error", "reason"),
    [
        ([("mupip journal -recover -backward", "failed")], [], None, None, "recovery step mupip journal"),
        ([], [("mupip integ", False)], PASSED, None, "mupip integ: mupip integ broken"),
        ([], [], Outcome({}, {"status": "failed", "message": "longest 12 != 13"}), None, "longest 12 != 13"),
        ([], [], None, "mount failed: wrong fs type", "mount failed: wrong fs type"),
        ([], [], None, None, "the recovery returned nothing"),
    ],
)
def test_a_point_fails_naming_what_failed(
    steps: list[tuple[str, str]],
    checks: list[tuple[str, bool]],
    outcome: Outcome | None,
    error: str | None,
    reason: str,
) -> None:
    verdict, said = flushpoints.point_verdict(_event(steps, checks), outcome, error)
    assert verdict == "failed" and reason in said


def test_a_failed_point_fails_the_run_and_says_which() -> None:
    event = crash.CrashEvent(mode="flush-points", after_s=1)
    event.points = [
        {"index": 0, "entry": 40, "verdict": "passed", "reason": ""},
        {"index": 1, "entry": 97, "verdict": "failed", "reason": "mupip integ: damaged"},
    ]
    assert event.problems() == ["flush point 1 (log entry 97): mupip integ: damaged"]
    assert crash.CrashEvent.from_dict(event.to_dict()) == event  # the section round-trips
    event.points[1]["verdict"] = "passed"
    assert event.problems() == []


def test_summary_and_snapshot_status() -> None:
    points = [{"verdict": "passed", "mount_s": 0.2}, {"verdict": "failed", "mount_s": 0.5}]
    assert flushpoints.summary(points) == "1 of 2 flush points passed; mount 0.2-0.5 s"
    assert flushpoints.snapshot_invalid("0 1048576 snapshot Invalid")
    assert not flushpoints.snapshot_invalid("0 1048576 snapshot 1024/2097152 16")


@needs_root
def test_a_mount_left_behind_is_named(tmp_path: Path) -> None:
    point = tmp_path / "data"
    point.mkdir()
    assert flushpoints.left_behind(point) == []
    subprocess.run(["mount", "-t", "tmpfs", "fsmatrix-test", str(point)], check=True)
    try:
        assert flushpoints.left_behind(point) == [f"mount {point}"]
    finally:
        subprocess.run(["umount", str(point)], check=True)


def test_disk_sizes_grow_with_the_data_disk() -> None:
    log_bytes, scratch_bytes = flushpoints.disk_sizes(1 << 30)
    assert log_bytes == 4 << 30 and scratch_bytes >= (2 << 30)
    assert flushpoints.disk_sizes(2 << 30)[0] == 2 * log_bytes


# --------------------------------------------------------------------------------------------
# backends


def test_qemu_accepts_flush_points_at_preflight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = QemuBackend(workdir=tmp_path)
    monkeypatch.setattr(backend, "_prepare", lambda: None)  # no image build: the refusal comes before it
    backend.preflight([_cell()])


def test_libvirt_refuses_flush_points_in_one_line(tmp_path: Path) -> None:
    cell = _cell()
    with pytest.raises(UserError, match=rf"^cell {cell.id}: crash.mode 'flush-points' is not built yet on the libvirt"):
        LibvirtBackend(workdir=tmp_path).preflight([cell])


def test_host_refuses_flush_points_saying_why(tmp_path: Path) -> None:
    cell = _cell()
    with pytest.raises(UserError) as caught:
        HostBackend(workdir=tmp_path).preflight([cell])
    said = str(caught.value)
    assert said.startswith(f"cell {cell.id}: crash.mode 'flush-points' needs a VM backend (--backend qemu)")
    assert "dm-log-writes" in said and "\n" not in said


def test_qemu_gives_a_flush_points_cell_a_log_and_a_scratch_disk(tmp_path: Path) -> None:
    backend = QemuBackend(workdir=tmp_path)
    cell = _cell(points=4)
    made = host_side.disks(cell, tmp_path, create=True)
    assert [d.serial for d in made] == [flushpoints.LOG_SERIAL, flushpoints.SCRATCH_SERIAL]
    assert [d.bus for d in made] == ["virtio-blk", "virtio-blk"]  # what flushpoints.find_disks looks for
    log_bytes, scratch_bytes = flushpoints.disk_sizes(512 << 20)
    assert [d.path.stat().st_size for d in made] == [log_bytes, scratch_bytes]
    assert all(d.path.stat().st_blocks == 0 for d in made)  # sparse, so zeroed: the log must start so
    launch = Launch(cell, 1, tmp_path, tmp_path / "o.qcow2", tmp_path / "j.img", [], tmp_path / "c.log")
    assert [d.serial for d in backend.drives(launch)][-2:] == ["fsm-log", "fsm-scratch"]
    assert backend.time_limit(cell) == 300 * 5 + backend.boot_allowance  # the run and each point
    other = _cell(mode="power-cut")
    assert host_side.disks(other, tmp_path) == []
    assert backend.time_limit(other) == 300 + backend.boot_allowance


def test_the_log_size_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FLUSH_LOG_BYTES_ENV, str(8 << 20))
    made = host_side.disks(_cell(), tmp_path, create=True)
    assert made[0].path.stat().st_size == 8 << 20


def test_the_corrupt_point_hook_reaches_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = QemuBackend(workdir=tmp_path)
    data = [Disk(tmp_path / "d0.img", "fsm-data0")]
    assert flushpoints.CORRUPT_POINT_KEY not in backend.job_document(_cell(), 1, data, {})["environment"]
    monkeypatch.setenv(FLUSH_CORRUPT_ENV, "2")
    assert backend.job_document(_cell(), 1, data, {})["environment"][flushpoints.CORRUPT_POINT_KEY] == 2
    other = _cell(mode="power-cut")  # only a flush-points cell is damaged
    assert flushpoints.CORRUPT_POINT_KEY not in backend.job_document(other, 1, data, {})["environment"]


# --------------------------------------------------------------------------------------------
# the guest side, where the host can run it


def test_corrupt_files_zeroes_the_start_of_every_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    big, small = tmp_path / "threen1.dat", tmp_path / "sub" / "threen1.mjl"
    big.write_bytes(b"\xff" * (flushpoints.CORRUPT_BYTES + 10))
    small.write_bytes(b"GDSDYNUNX03")
    assert flushpoints.corrupt_files(tmp_path) == 2
    assert big.read_bytes() == bytes(flushpoints.CORRUPT_BYTES) + b"\xff" * 10  # same size, head zeroed
    assert small.read_bytes() == bytes(11)


def test_the_corrupt_hook_damages_only_its_point(tmp_path: Path) -> None:
    assert flushpoints.corrupt_hook({}, tmp_path) is None
    hook = flushpoints.corrupt_hook({flushpoints.CORRUPT_POINT_KEY: 1}, tmp_path)
    assert hook is not None
    target = tmp_path / "db.dat"
    target.write_bytes(b"x" * 100)
    hook("/dev/mapper/x", 0)
    assert target.read_bytes() == b"x" * 100
    hook("/dev/mapper/x", 1)
    assert target.read_bytes() == bytes(100)


def test_missing_disks_are_named(tmp_path: Path) -> None:
    with pytest.raises(flushpoints.FlushPointsError, match="needs the log and scratch disks .* serial 'fsm-log'"):
        flushpoints.find_disks(by_id=tmp_path, wait_s=0)


@needs_root
def test_a_host_run_without_the_disks_is_an_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flushpoints, "DISK_WAIT_S", 0.5)
    cell = _cell(disk_size="64M")
    with loop_devices(1, 64 << 20, tmp_path) as devices:
        result = job.run_job(job.Job(job.CellRepeat(cell.spec, cell.id, 1), devices, tmp_path / "w", {}))
    assert result["status"] == "error"
    assert result["reason"].startswith("FlushPointsError: crash.mode 'flush-points' needs the log and scratch")
    assert result["crash"]["points"] == [] and result["crash"]["flush_points"] is None
    assert not attached_under(tmp_path) and not mounted_under(tmp_path)
