"""The record of a crash and of the recovery after it: the result's ``crash`` section (``CrashEvent``).

A workload's recover hook fills in its steps, checks and what it reused; ``job`` stores
``event.to_dict()`` as the result's ``crash``. ``MEASURE_START_MARKER`` is printed on stdout (and
logged) when the measured part of a crash cell begins, so that a VM backend's host side knows when
to start its own clock. Standard library only: the guest runs this too.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fsmatrix.agent.crash.settings import CrashSettings

log = logging.getLogger("fsmatrix")

MEASURE_START_MARKER = "FSMATRIX-MEASURE-START"
DETAIL_CHARS = 600  # of an error message, in a step's record and the run's reason


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
    def for_settings(cls, settings: CrashSettings) -> CrashEvent:
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


def announce_measure_start() -> None:
    """The console line a VM backend's host side waits for (crash cells only)."""
    print(MEASURE_START_MARKER, flush=True)
    sys.stdout.flush()
    log.info(MEASURE_START_MARKER)
