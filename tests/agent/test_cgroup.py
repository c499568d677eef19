"""A run's CPU time from its own cgroup: detached children counted, the neighbours not, and this process
(the CLI on the host backend, its progress bar and samplers) never: only the commands the run starts
enter, each by itself before it execs (proc.in_run)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from fsmatrix.agent import cgroup, proc

needs_cgroup = pytest.mark.skipif(cgroup.find_hierarchy() is None, reason="no cgroup hierarchy mounted")


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def _detached_spinner(seconds: float) -> None:
    """A grandchild that outlives its parent (as GT.M's JOB workers do), spinning ``seconds`` of CPU."""
    code = f"import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"
    launcher = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {code!r}], start_new_session=True)"
    proc.run(["python3", "-c", launcher])


@needs_cgroup
def test_counts_detached_children_and_not_the_neighbours(tmp_path: Path) -> None:
    neighbour = subprocess.Popen(["python3", "-c", "while True: pass"])  # started outside the run
    try:
        with cgroup.RunCpu() as cpu:
            assert cpu.available and cpu.directory is not None
            with cpu.measured():
                _detached_spinner(0.6)
                _spin(0.5)  # this process's own work: not the run's
                # Until the detached grandchild has finished (however busy the machine); the
                # neighbour spins all the while.
                deadline = time.monotonic() + 60
                while (cpu.directory / "cgroup.procs").read_text().split():
                    assert time.monotonic() < deadline, "the detached child never finished"
                    time.sleep(0.1)
                time.sleep(0.5)
        seconds = cpu.seconds()
    finally:
        neighbour.kill()
        neighbour.wait()
    assert seconds is not None
    busy = seconds["user"] + seconds["system"]
    assert 0.5 <= busy < 1.05, seconds  # the grandchild's 0.6 s, not this process's 0.5 s nor the neighbour's
    assert cpu.directory is None  # removed, and this process is back home
    home = cgroup.own_cgroup(cpu.hierarchy)  # type: ignore[arg-type]
    assert not list(home.parent.glob(f"{cgroup.PREFIX}{os.getpid()}-*")) and not list(
        home.glob(f"{cgroup.PREFIX}{os.getpid()}-*")
    )


@needs_cgroup
def test_without_a_measured_block_the_whole_run_counts() -> None:
    with cgroup.RunCpu() as cpu:
        proc.run(
            ["python3", "-c", "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"]
        )
    seconds = cpu.seconds()
    assert seconds is not None and seconds["user"] + seconds["system"] >= 0.25


@needs_cgroup
def test_this_process_and_its_threads_never_enter_only_the_commands_it_starts() -> None:
    # issue 51: the agent moved itself in, and the host backend's progress bar and samplers counted
    with cgroup.RunCpu() as cpu:
        assert cpu.directory is not None
        procs = cpu.directory / "cgroup.procs"
        assert str(os.getpid()) not in procs.read_text().split()
        inside = proc.output(["sh", "-c", "cat /proc/self/cgroup"])
        assert cpu.directory.name in inside  # the command joined before it ran
        assert str(os.getpid()) not in procs.read_text().split()
    assert proc.in_run(["true"]) == (["true"], {})  # closed: commands start as before


@needs_cgroup
def test_a_command_run_as_another_user_joins_as_root_then_drops_to_that_user() -> None:
    with cgroup.RunCpu() as cpu:
        assert cpu.directory is not None
        out = proc.output(proc.AsUser(["sh", "-c", "id -u; cat /proc/self/cgroup"], 65534, 65534))  # type: ignore[arg-type]
        assert out.split()[0] == "65534" and cpu.directory.name in out


def test_no_hierarchy_means_no_figure() -> None:
    with cgroup.RunCpu(hierarchy=None) as cpu:
        cpu.hierarchy = None
    assert cpu.seconds() is None and cpu.source == "none"


def test_hierarchy_and_own_cgroup_parsing() -> None:
    mounts = (
        "cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
    )
    v2 = cgroup.find_hierarchy(mounts)
    assert v2 == cgroup.Hierarchy(2, Path("/sys/fs/cgroup/unified"))
    v1 = cgroup.find_hierarchy(mounts.splitlines()[0])
    assert v1 == cgroup.Hierarchy(1, Path("/sys/fs/cgroup/cpuacct"))
    assert cgroup.find_hierarchy("proc /proc proc rw 0 0\n") is None
    text = "2:cpu,cpuacct:/a/b\n0::/system.slice/x.service\n"
    assert cgroup.own_cgroup(v2, text) == Path("/sys/fs/cgroup/unified/system.slice/x.service")  # type: ignore[arg-type]
    assert cgroup.own_cgroup(v1, text) == Path("/sys/fs/cgroup/cpuacct/a/b")  # type: ignore[arg-type]


@needs_cgroup
def test_stale_cgroups_of_dead_runs_are_removed() -> None:
    hierarchy = cgroup.find_hierarchy()
    assert hierarchy is not None
    parent = cgroup.own_cgroup(hierarchy)
    parent = parent.parent if parent != hierarchy.root else parent
    proc = subprocess.Popen(["true"])  # a pid that has surely exited
    proc.wait()
    stale = parent / f"{cgroup.PREFIX}{proc.pid}-0"
    stale.mkdir()
    live = parent / f"{cgroup.PREFIX}{os.getpid()}-0"
    live.mkdir()
    try:
        cgroup.remove_stale(parent)
        assert not stale.exists() and live.exists()
    finally:
        for d in (stale, live):
            if d.exists():
                d.rmdir()
