"""Faults during a run (issue 15): a full data disk is that run's recorded failure and the matrix
goes on; a full results directory stops the matrix with one line and leaves no partial result."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FSMATRIX, attached_under, mounted_under, needs_root
from fsmatrix.agent import job
from fsmatrix.agent.parsing import parse_cell
from fsmatrix.agent.storage import loop_devices

pytestmark = [needs_root, pytest.mark.system]


def test_a_cell_too_big_for_its_disk_is_refused_before_the_run(tmp_path: Path) -> None:
    """3n+1 1..1,000,000 on a 96 MiB ext4: the fit check (agent/fit.py) refuses it up front, one line."""
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "name: full\naxes:\n  filesystem: [ext4]\n  workload.threen1.end: [1000000, 1000]\n"
        "defaults:\n  workload.threen1: {start: 1, workers: 1}\n  storage.disk_size: 96M\n"
    )
    done = subprocess.run(
        [*FSMATRIX, "run", str(matrix), "--results", str(tmp_path / "r"), "--workdir", str(tmp_path / "w")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "workload.threen1.end" in done.stderr and "storage.disk_size '96M'" in done.stderr


def test_full_data_disk_is_a_failed_run(tmp_path: Path) -> None:
    """When the estimate is wrong all the same: 3n+1 1..1,000,000 on a 96 MiB ext4 (the database alone
    preallocates ~48 MB, the journal needs more than the rest), run as a job (a cell made outside a
    matrix skips the fit check): the database cannot grow inside the run, and nothing is left behind."""
    cell = parse_cell(
        {
            "filesystem": "ext4",
            "storage": {"disk_size": "96M"},
            "workload": {"threen1": {"start": 1, "end": 1000000, "workers": 1}},
        }
    )
    with loop_devices(1, 96 << 20, tmp_path) as devices:
        result = job.run_job(job.Job(job.CellRepeat(cell, "full", 1), devices, tmp_path / "w", {}))
    assert result["status"] in ("error", "failed") and result["reason"], result
    real = Path(os.path.realpath(tmp_path))
    assert attached_under(real) == [] and mounted_under(real) == []


def test_full_results_directory_stops_with_one_line(tmp_path: Path) -> None:
    """The results root on a 512 KiB tmpfs that is almost full: exit 2, one line, no result file."""
    root = tmp_path / "results"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "fsmatrix-test-full", str(root)], check=True)
    try:
        with (root / "fill").open("wb") as f:
            f.write(b"\0" * (500 << 10))
        matrix = tmp_path / "m.yaml"
        matrix.write_text(
            "name: nospace\naxes:\n  filesystem: [tmpfs]\n"
            "defaults:\n  workload.threen1: {start: 1, end: 1000, workers: 1}\n  storage.disk_size: 64M\n"
        )
        done = subprocess.run(
            [*FSMATRIX, "run", str(matrix), "--results", str(root), "--workdir", str(tmp_path / "work")],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("fsmatrix: error: ")
        assert not list(root.rglob("r1.json")) and not list(root.rglob("*.tmp"))
    finally:
        subprocess.run(["umount", str(root)], check=True)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("point", ["starting", "mounted"])
def test_interrupt_at_several_points_leaves_nothing(tmp_path: Path, signum: int, point: str) -> None:
    """SIGINT / SIGTERM of ``fsmatrix run`` just after start and while its cell runs on a mounted
    loop device: no loop device, mount or run directory is left. (While GT.M runs, the workload
    turns the interrupt into that run's error and the run ends with status 1, not 130: found here,
    not changed by this test.)"""
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "name: sig\naxes:\n  filesystem: [ext4]\n"
        "defaults:\n  workload.threen1: {start: 1, end: 1000000, workers: 2}\n  storage.disk_size: 1G\n"
    )
    workdir = tmp_path / "work"
    real = Path(os.path.realpath(tmp_path))
    run = subprocess.Popen(
        [*FSMATRIX, "run", str(matrix), "--results", str(tmp_path / "r"), "--workdir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if point == "starting":
            time.sleep(1.0)
        else:
            deadline = time.monotonic() + 300
            while not mounted_under(real):
                assert run.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
            time.sleep(2)
        run.send_signal(signum)
        _, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode in ((1, 130) if point == "mounted" else (130, -signum, 128 + signum)), stderr
    assert "Traceback" not in stderr or point == "starting", stderr
    assert attached_under(real) == [] and mounted_under(real) == [], stderr
    assert not workdir.exists() or list(workdir.iterdir()) == [], (list(workdir.iterdir()), stderr)


def test_a_loop_device_losetup_attached_unreported_is_detached_too(tmp_path: Path) -> None:
    """An interrupt inside losetup can leave the image attached without fsmatrix learning the
    device's name (found by the SIGINT test above). Simulated by attaching a second loop device to
    the image behind fsmatrix's back: leaving loop_devices detaches both."""
    from fsmatrix.agent.storage import loop_devices

    real = Path(os.path.realpath(tmp_path))
    with loop_devices(1, 16 << 20, tmp_path) as (device,):
        image = Path((Path("/sys/block") / Path(device).name / "loop" / "backing_file").read_text().strip())
        stray = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=True)
        assert len(attached_under(real)) == 2, stray.stdout
    assert attached_under(real) == []
