"""Crash injection, and the record of a crash and of the recovery after it (the result's ``crash`` section).

A cell with a ``crash`` block (``Settings``) is run to be crashed on purpose ``after_s`` seconds into
its *measured* part, then recovered by its workload's ``recover`` hook, which checks the database's
integrity and resumes the work. The modes:

- ``kill``: every process of the run's database gets SIGKILL (``Injector``). The kernel, its page
  cache and the filesystem live on: this tests the database's own crash safety, nothing below it.
  Works on every backend (the guest agent kills, as the host one does).
- ``power-cut``: the VM backends stop QEMU at once; the guest reboots and the recovery runs on the
  filesystem as the disk holds it (``job.run_recovery``). The host backend refuses it.
- ``flush-points``: the qemu backend only. The data device sits behind dm-log-writes; after a
  normal run its log is replayed onto a scratch disk up to ``points`` flush/FUA points chosen with
  ``seed``, and each replayed state is mounted, recovered and verified (``fsmatrix.agent.crash.flush_points``).
  ``after_s`` is not used by this mode.

``CrashEvent`` is what happened and what the recovery did; a workload's hook fills in its steps,
checks and what it reused, and ``job`` stores ``event.to_dict()`` as the result's ``crash``.

``MEASURE_START_MARKER`` is printed on stdout (and logged) when the measured part of a crash cell
begins, so that a VM backend's host side knows when to start its own clock. Standard library
only: the guest runs this too.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from fsmatrix.agent import proc
from fsmatrix.agent.declare import setting

log = logging.getLogger("fsmatrix")

KILL, POWER_CUT, FLUSH_POINTS = "kill", "power-cut", "flush-points"
MODES = (POWER_CUT, KILL, FLUSH_POINTS)
VM_ONLY_MODES = (POWER_CUT, FLUSH_POINTS)  # need a machine to stop: the host backend refuses them
MEASURE_START_MARKER = "FSMATRIX-MEASURE-START"
DETAIL_CHARS = 600  # of an error message, in a step's record and the run's reason
KILL_ROUNDS = 20  # rounds of SIGKILL until none of the run's processes is left


@dataclass(frozen=True)
class Settings:
    """The cell's ``crash`` block; a cell without one is never crashed."""

    mode: str = setting(choices=MODES, help="kill: SIGKILL the database; power-cut, flush-points: VM backends")
    after_s: float = setting(minimum=0, exclusive_minimum=True, help="seconds into the measured workload")
    points: int = setting(10, minimum=1, maximum=100000, help="flush-points: how many flush points to replay to")
    seed: int = setting(0, minimum=0, help="flush-points: which flush points are chosen")


class RecoveryFailed(RuntimeError):
    """A recovery step failed: the run fails (a finding), naming the step."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step


@dataclass
class CrashEvent:
    """What the crash did, and what the recovery after it did: the result's ``crash`` section.

    ``fired_at_s`` and ``measured_s`` count from the start of the measured part. ``steps``: each
    recovery step in order, ``{"name", "seconds", "status": "ok" | "failed" | "not-attempted",
    "detail"}``; ``checks``: ``{"name", "verdict": "passed" | "failed", "message"}``; ``reused``:
    the work found in the database and not done again; ``lost_commits``: for a database that
    acknowledges commits, how many acknowledged ones are gone (None: not applicable).
    ``acknowledged``: for such a database, the highest commit its client saw acknowledged before the
    crash. After a power cut the guest's own record of it is gone with the guest, so the host fills
    it in from the VM's serial log (``pgacks.parse_acks(log, tag)``) before the recover phase; None:
    the recover hook reads its own sink (a file that survives a kill) and records the count here.
    """

    mode: str
    after_s: float
    fired: bool = False
    fired_at_s: float | None = None
    measured_s: float | None = None  # how long the measured part ran (until the crash, or its end)
    killed: list[int] = field(default_factory=list)  # kill: the pids that got SIGKILL
    kill_source: str | None = None  # kill: where they were found: "cgroup" or "open-files"
    workload_error: str | None = None  # how the workload ended when its processes died
    mount_s: float | None = None  # recover phase: mounting the crashed filesystem (its journal replay)
    recovery_s: float | None = None  # the database's own recovery (e.g. mupip journal -recover)
    steps: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    reused: dict[str, Any] = field(default_factory=dict)
    lost_commits: int | None = None
    acknowledged: int | None = None  # power-cut: from the host's serial log; else the hook's own count
    # flush-points: how the points were drawn and what the log held (seed, available, chosen, log
    # bytes), and one record per point replayed (flushpoints.PointRecord): each must pass.
    flush_points: dict[str, Any] | None = None
    points: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def for_settings(cls, settings: Settings) -> CrashEvent:
        return cls(mode=settings.mode, after_s=settings.after_s)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> CrashEvent:
        """From a stored ``crash`` section (the crash phase's, handed to the recover phase)."""
        known = {f.name for f in fields(cls)}
        # A copy: the recovery appends to steps and checks, and must not change the caller's document.
        return cls(**{k: copy.deepcopy(v) for k, v in doc.items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @contextlib.contextmanager
    def step(self, name: str, *, recovery: bool = False) -> Iterator[dict[str, Any]]:
        """Time a recovery step; its record is yielded for a ``detail``. An exception fails the
        step and is raised again as RecoveryFailed. ``recovery``: its seconds are ``recovery_s``."""
        record: dict[str, Any] = {"name": name, "seconds": None, "status": "ok", "detail": ""}
        self.steps.append(record)
        t0 = time.monotonic()
        try:
            yield record
        except RecoveryFailed:
            record["status"] = "failed"
            raise
        except Exception as exc:
            record["status"] = "failed"
            text = short(str(exc)) or type(exc).__name__
            record["detail"] = record["detail"] or text
            raise RecoveryFailed(name, text) from exc
        finally:
            record["seconds"] = round(time.monotonic() - t0, 3)
            if recovery:
                self.recovery_s = record["seconds"]

    def not_attempted(self, name: str, why: str) -> None:
        """A step that cannot be done in this configuration (e.g. no journal to recover from)."""
        self.steps.append({"name": name, "seconds": None, "status": "not-attempted", "detail": why})

    def check(self, name: str, passed: bool, message: str) -> None:
        self.checks.append({"name": name, "verdict": "passed" if passed else "failed", "message": message})

    def problems(self) -> list[str]:
        """What failed: failed steps and failed checks, in words (empty: all well)."""
        found = [f"recovery step {s['name']} failed: {s['detail']}" for s in self.steps if s["status"] == "failed"]
        found += [f"{c['name']}: {c['message']}" for c in self.checks if c["verdict"] == "failed"]
        found += [
            f"flush point {p['index']} (log entry {p['entry']}): {p['reason']}"
            for p in self.points
            if p.get("verdict") != "passed"
        ]
        return found


def short(text: str) -> str:
    """An error message on one line, its end kept (where a tool's output says what went wrong)."""
    line = " | ".join(part.strip() for part in text.strip().splitlines() if part.strip())
    return line if len(line) <= DETAIL_CHARS else "..." + line[-DETAIL_CHARS:]


# ------------------------------------------------------------------------------------ the injector


def cgroup_members(directory: Path) -> list[int]:
    """The processes in a cgroup (v1 or v2 both list them in cgroup.procs)."""
    try:
        return [int(p) for p in (directory / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def children_of(parent: int) -> list[int]:
    """Direct children of ``parent`` (from /proc/*/stat)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        after = stat.rpartition(")")[2].split()
        if len(after) > 1 and after[1] == str(parent):
            found.append(int(entry.name))
    return found


def processes_using(directories: Iterable[Path]) -> list[int]:
    """Processes with a file open (or their cwd) under any of ``directories``."""
    prefixes = [str(Path(d).resolve()).rstrip("/") + "/" for d in directories]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            targets = [os.readlink(entry / "cwd")] + [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue
        if any(t.startswith(p) or t + "/" == p for t in targets for p in prefixes):
            found.append(int(entry.name))
    return found


class Injector:
    """The ``kill`` mode: ``with injector.armed():`` around the measured part; ``after_s`` into it,
    unless it has ended, every process of the run except this one gets SIGKILL.

    The run's processes are those of its cgroup (``cgroup.RunCpu`` puts the run there, and GT.M's
    detached JOB workers and a database server stay in it); without one, this process's children
    and every process with a file open under ``directories`` (the database's files).
    """

    def __init__(self, event: CrashEvent, cgroup_dir: Path | None, directories: Iterable[Path] = ()) -> None:
        self.event = event
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
        if self.event.mode == KILL:
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
            pids = children_of(me) + processes_using(self.directories)
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


def announce_measure_start() -> None:
    """The console line a VM backend's host side waits for (crash cells only)."""
    print(MEASURE_START_MARKER, flush=True)
    sys.stdout.flush()
    log.info(MEASURE_START_MARKER)
