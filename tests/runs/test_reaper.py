"""Leftovers of dead runs (issue 15): a run's directory is locked while it lives; the reaper removes
a dead run's processes, mounts, loop devices and directory, and never touches a live run or a
directory it did not make. Ends with SIGKILL of a real ``fsmatrix run`` and a re-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import FSMATRIX, attached_under, mounted_under, needs_root
from fsmatrix import workdirs
from fsmatrix.agent import proc
from fsmatrix.backends.qemu.process import parent_death_prefix

pytestmark = [needs_root, pytest.mark.system]


# A stand-in for a run: takes its run directory, attaches a loop device to a file in it, mounts it,
# starts a child working in the mount, says "up" and sleeps until killed.
RUN = textwrap.dedent(
    """\
    import subprocess, sys, time
    from pathlib import Path
    from fsmatrix import workdirs
    with workdirs.run_directory(Path(sys.argv[1]), "cell-r1-test") as d:
        image = d / "data.img"
        image.write_bytes(b"\\0" * (16 << 20))
        loop = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True,
                              check=True).stdout.strip()
        subprocess.run(["mkfs.ext2", "-qF", loop], check=True)
        (d / "mnt").mkdir()
        subprocess.run(["mount", loop, str(d / "mnt")], check=True)
        worker = subprocess.Popen(["sleep", "600"], cwd=d / "mnt")
        print("up", loop, worker.pid, flush=True)
        time.sleep(600)
    """
)


def start_run(workdir: Path) -> tuple[subprocess.Popen[str], str, int]:
    run = subprocess.Popen([sys.executable, "-c", RUN, str(workdir)], stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None
    word, loop, worker = run.stdout.readline().split()
    assert word == "up"
    return run, loop, int(worker)


def test_live_run_untouched_dead_run_reaped(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    real = Path(os.path.realpath(workdir.parent)) / "work"
    foreign = workdir / "not-ours"  # no lock file: an older fsmatrix's, or anything else
    run, loop, worker = start_run(workdir)
    try:
        foreign.mkdir()
        (foreign / "keep").write_text("x")
        assert workdirs.reap(workdir) == []  # alive: its lock is held
        assert attached_under(real) and mounted_under(real) and proc.holds_files(worker)
        run.kill()  # SIGKILL: nothing of it cleans up
        run.wait()
        assert attached_under(real) and mounted_under(real) and proc.holds_files(worker)  # left behind
        removed = workdirs.reap(workdir)
        assert f"process {worker} (sleep)" in removed
        assert any(r.startswith("mount ") for r in removed)
        assert f"loop device {loop} ({real}/cell-r1-test/data.img)" in removed
        assert f"directory {workdir / 'cell-r1-test'}" in removed
        assert attached_under(real) == [] and mounted_under(real) == [] and not proc.holds_files(worker)
        assert sorted(p.name for p in workdir.iterdir()) == ["not-ours"]
        assert (foreign / "keep").read_text() == "x"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        workdirs.reap(workdir)


def test_cleanup_command_reports(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    run, loop, _ = start_run(workdir)
    run.kill()
    run.wait()
    done = subprocess.run([*FSMATRIX, "cleanup", "--workdir", str(workdir)], capture_output=True, text=True, check=True)
    assert f"removed loop device {loop}" in done.stdout and "removed directory" in done.stdout
    again = subprocess.run(
        [*FSMATRIX, "cleanup", "--workdir", str(workdir)], capture_output=True, text=True, check=True
    )
    assert again.stdout.strip() == f"nothing to clean up in {workdir}"


def test_qemu_dies_with_its_runner(tmp_path: Path) -> None:
    """The parent-death signal: a runner killed with SIGKILL takes its QEMU with it."""
    parent = textwrap.dedent(
        f"""\
        import subprocess, sys, time
        vm = subprocess.Popen({parent_death_prefix()!r} + ["qemu-system-x86_64", "-machine", "none",
                              "-nodefaults", "-display", "none", "-S", "-name", "fsmatrix-pdeathsig-test"])
        print(vm.pid, flush=True)
        time.sleep(600)
        """
    )
    runner = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    assert runner.stdout is not None
    qemu = int(runner.stdout.readline())
    try:
        time.sleep(0.5)
        assert proc.holds_files(qemu)
        runner.kill()
        runner.wait()
        for _ in range(50):
            if not proc.holds_files(qemu):
                break
            time.sleep(0.1)
        assert not proc.holds_files(qemu), "QEMU outlived its runner"
    finally:
        if proc.holds_files(qemu):
            os.kill(qemu, signal.SIGKILL)


@pytest.mark.timeout(900)
def test_kill_9_mid_run_then_rerun(tmp_path: Path) -> None:
    """SIGKILL of ``fsmatrix run`` while its 3n+1 cell runs on a mounted loop device; the re-run
    removes what the dead run left (loop device, mount, GT.M workers, directory) and completes."""
    workdir, results = tmp_path / "work", tmp_path / "results"
    real = Path(os.path.realpath(tmp_path)) / "work"
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "name: killed\naxes:\n  filesystem: [ext4]\n"
        "defaults:\n  workload.threen1: {start: 1, end: 1000000, workers: 2}\n  storage.disk_size: 1G\n"
    )
    command = [*FSMATRIX, "run", str(matrix), "--results", str(results), "--workdir", str(workdir)]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not mounted_under(real):
            assert first.poll() is None, "the run ended before it mounted anything"
            assert time.monotonic() < deadline, "no mount within 300 s"
            time.sleep(0.2)
        time.sleep(3)  # GT.M is at work now
        assert first.poll() is None
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert mounted_under(real) and attached_under(real)  # what a dead run leaves
        dead = [p.name for p in workdir.iterdir()]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    second = subprocess.run(command, capture_output=True, text=True, timeout=800, check=False)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "removed what dead runs left" in second.stderr
    assert mounted_under(real) == [] and attached_under(real) == []
    assert not any(name in dead for name in os.listdir(workdir))
    (doc,) = [json.loads(p.read_text()) for p in results.glob("killed/*/r1.json")]
    assert doc["status"] == "passed", doc.get("reason")
