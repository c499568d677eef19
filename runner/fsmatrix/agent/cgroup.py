"""The CPU time of one run's own processes, from a cgroup the run is placed in.

Summing a process tree misses what matters: GT.M's JOB workers and the PostgreSQL server detach
from the process that started them, and the machine-wide /proc/stat counts the neighbours too. A
cgroup catches every process started inside it, detached or not. ``RunCpu`` makes a fresh cgroup for
the run, and every command the run starts (``proc.run``, the database servers) writes its own pid
into it before it execs (``proc.in_run``: an exec wrapper): the workload's processes enter, this
process never does. On the host backend it is the CLI, whose progress bar and samplers are no part
of the run's CPU seconds, instructions, cycles or context switches (before issue 51 they were: this
process entered the cgroup itself). It reads the cgroup's CPU counters around the measured part,
and moves what is left back and removes the cgroup on the way out.

cgroup v2 (``cpu.stat``: user_usec, system_usec, present in every cgroup even without the cpu
controller) is used where it is mounted, else v1's ``cpuacct``. Where neither can be written (an
unprivileged container), ``available`` is False and the caller falls back to /proc/stat.
Standard library only: the guest runs this too.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fsmatrix.agent import proc

log = logging.getLogger("fsmatrix")

PREFIX = "fsmatrix-run-"
USER_HZ = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Hierarchy:
    version: int  # 2 (unified) or 1 (cpuacct)
    root: Path  # its mount point


def find_hierarchy(mounts: str | None = None) -> Hierarchy | None:
    """Where a run's cgroup can go: the cgroup2 mount, else the v1 cpuacct one (from /proc/self/mounts)."""
    text = mounts if mounts is not None else Path("/proc/self/mounts").read_text(encoding="utf-8")
    v1 = None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        if fields[2] == "cgroup2":
            return Hierarchy(2, Path(fields[1]))
        if fields[2] == "cgroup" and "cpuacct" in fields[3].split(",") and v1 is None:
            v1 = Hierarchy(1, Path(fields[1]))
    return v1


def own_cgroup(hierarchy: Hierarchy, proc_cgroup: str | None = None) -> Path:
    """This process's cgroup directory in ``hierarchy`` (from /proc/self/cgroup)."""
    text = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text(encoding="utf-8")
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if (hierarchy.version == 2 and controllers == "") or (
            hierarchy.version == 1 and "cpuacct" in controllers.split(",")
        ):
            return hierarchy.root / path.lstrip("/")
    return hierarchy.root


def read_cpu(directory: Path, version: int) -> tuple[float, float]:
    """(user, system) CPU seconds a cgroup has used."""
    if version == 2:
        stat = dict(line.split() for line in (directory / "cpu.stat").read_text().splitlines() if line.strip())
        return int(stat["user_usec"]) / 1e6, int(stat["system_usec"]) / 1e6
    stat = dict(line.split() for line in (directory / "cpuacct.stat").read_text().splitlines() if line.strip())
    return int(stat["user"]) / USER_HZ, int(stat["system"]) / USER_HZ


def _move(pid: int, directory: Path) -> None:
    (directory / "cgroup.procs").write_text(f"{pid}\n")


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def remove_stale(parent: Path) -> None:
    """Remove empty run cgroups left by runs that died (a cgroup is named after its run's pid)."""
    for stale in parent.glob(f"{PREFIX}*"):
        pid = stale.name[len(PREFIX) :].partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):  # not empty (a process survived): leave it
                stale.rmdir()


class RunCpu:
    """``with RunCpu() as cpu:`` ... ``with cpu.measured(): ...`` ... ``cpu.seconds()``."""

    def __init__(self, hierarchy: Hierarchy | None = None) -> None:
        self.hierarchy = hierarchy if hierarchy is not None else find_hierarchy()
        self.directory: Path | None = None
        self._home: Path | None = None
        self._start: tuple[float, float] | None = None
        self._end: tuple[float, float] | None = None
        self._window: tuple[tuple[float, float], tuple[float, float]] | None = None

    @property
    def available(self) -> bool:
        return self.directory is not None

    @property
    def source(self) -> str:
        """Where seconds() comes from: "cgroup2", "cgroup1", or "none"."""
        return f"cgroup{self.hierarchy.version}" if self._start is not None and self.hierarchy else "none"

    def __enter__(self) -> RunCpu:
        if self.hierarchy is None:
            return self
        try:
            home = own_cgroup(self.hierarchy)
            # Beside our own cgroup, not inside it: in v2 a cgroup with processes cannot have
            # children that hold processes when controllers are enabled ("no internal processes").
            parent = home.parent if home != self.hierarchy.root else home
            remove_stale(parent)
            directory = parent / f"{PREFIX}{os.getpid()}-{id(self):x}"
            directory.mkdir()
        except OSError as exc:
            log.debug("no cgroup for this run (%s): CPU from /proc/stat", exc)
            return self
        proc.set_run_cgroup(directory)
        try:  # a command that joins it: what every command of the run will do
            proc.run(["true"], timeout=30)
        except proc.CommandError as exc:
            proc.set_run_cgroup(None)
            log.debug("cannot enter cgroup %s (%s): CPU from /proc/stat", directory, exc)
            with contextlib.suppress(OSError):
                directory.rmdir()
            return self
        self.directory, self._home = directory, home
        self._start = read_cpu(directory, self.hierarchy.version)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.directory is None or self._home is None or self.hierarchy is None:
            return
        self._end = read_cpu(self.directory, self.hierarchy.version)
        proc.set_run_cgroup(None)
        # Every process still in the run's cgroup goes to ours (the workload's own cleanup has
        # normally ended them); then the empty cgroup can go.
        for _ in range(3):
            with contextlib.suppress(OSError):
                for pid in (self.directory / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        _move(int(pid), self._home)
            try:
                self.directory.rmdir()
                break
            except OSError:
                continue
        else:
            log.warning("could not remove cgroup %s", self.directory)
        self.directory = None

    @contextlib.contextmanager
    def measured(self) -> Iterator[None]:
        """Mark the measured part of the run, as Sampler.measured does (the last block counts)."""
        if self.directory is None or self.hierarchy is None:
            yield
            return
        directory, version = self.directory, self.hierarchy.version
        start = read_cpu(directory, version)
        try:
            yield
        finally:
            self._window = (start, read_cpu(directory, version))

    def seconds(self) -> dict[str, float] | None:
        """{"user", "system"} CPU seconds of the run's processes in the measured block, or over the
        whole ``with`` when none was marked (call after it ends); None without a cgroup."""
        start, end = self._window or (self._start, self._end)
        if start is None or end is None:
            return None
        return {"user": round(end[0] - start[0], 3), "system": round(end[1] - start[1], 3)}
