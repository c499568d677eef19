"""The crash clock of a crash cell's measured part and, for ``kill``, the SIGKILL of the run's processes."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from fsmatrix.agent import proc
from fsmatrix.agent.crash.event import CrashEvent, announce_measure_start

log = logging.getLogger("fsmatrix")

KILL_ROUNDS = 20  # rounds of SIGKILL until none of the run's processes is left


def cgroup_members(directory: Path) -> list[int]:
    """The processes in a cgroup (v1 or v2 both list them in cgroup.procs)."""
    try:
        return [int(p) for p in (directory / "cgroup.procs").read_text().split()]
    except OSError:
        return []


class Injector:
    """The crash clock: ``with injector.armed():`` around the measured part announces its start and
    times it. With ``kill`` (the ``kill`` mode), ``after_s`` into it, unless it has ended, every
    process of the run except this one gets SIGKILL.

    The run's processes are those of its cgroup (``cgroup.RunCpu`` puts the run there, and GT.M's
    detached JOB workers and a database server stay in it); without one, this process's children
    and every process with a file open under ``directories`` (the database's files).
    """

    def __init__(
        self, event: CrashEvent, cgroup_dir: Path | None, directories: Iterable[Path] = (), *, kill: bool = False
    ) -> None:
        self.event = event
        self.kill = kill
        self.cgroup_dir = cgroup_dir
        self.directories = list(directories)
        self._lock = threading.Lock()
        self._live = False
        self._t0 = 0.0
        self._timer: threading.Timer | None = None

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        """The measured part: the crash clock runs inside it (once: a second measured part, a
        resume after the recovery say, is never crashed)."""
        if self._t0:
            yield
            return
        self._t0 = time.monotonic()
        announce_measure_start()
        if self.kill:
            with self._lock:
                self._live = True
            self._timer = threading.Timer(self.event.after_s, self.fire)
            self._timer.daemon = True
            self._timer.start()
        try:
            yield
        finally:
            with self._lock:  # from here on a late timer does nothing
                self._live = False
            if self._timer is not None:
                self._timer.cancel()
            if self.event.measured_s is None:
                self.event.measured_s = round(time.monotonic() - self._t0, 3)

    def _targets(self) -> list[int]:
        me = os.getpid()
        if self.cgroup_dir is not None:
            pids = cgroup_members(self.cgroup_dir)
        else:
            pids = proc.children_of(me) + proc.processes_using(self.directories)
        return sorted({p for p in pids if p != me and proc.holds_files(p)})

    def fire(self) -> None:
        """SIGKILL the run's processes now (the timer calls this; a test may too)."""
        with self._lock:
            if not self._live:
                return
            self._live = False
            event = self.event
            event.fired = True
            event.fired_at_s = round(time.monotonic() - self._t0, 3)
            event.kill_source = "cgroup" if self.cgroup_dir is not None else "open-files"
            killed: set[int] = set()
            for _ in range(KILL_ROUNDS):
                targets = self._targets()  # the living: a process may fork while we kill
                if not targets:
                    break
                for pid in targets:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                        killed.add(pid)
                time.sleep(0.01)
            event.killed = sorted(killed)
            event.measured_s = event.fired_at_s
        log.warning("crash: killed %d processes %.3f s into the measured part", len(killed), event.fired_at_s)
