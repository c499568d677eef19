"""Crash recovery: crash a cell's run on purpose, recover, and prove what survived.

A cell with a ``crash`` block (``CrashSettings``) is crashed ``after_s`` seconds into its *measured*
part (or, for modes that replay, at chosen points), then recovered by its workload's ``recover``
hook, which checks the database's integrity and resumes the work. The result's ``crash`` section is
the ``CrashEvent`` (``event.py``).

The modes: one module each, declaring ``MODE = CrashMode(...)`` (``mode.py``: what the mode does
around a run, through a few hooks ``job.run_job`` calls), and one line each in ``MODES`` (``settings.py``):

- ``kill`` (``kill.py``): SIGKILL the run's processes; works on every backend;
- ``power-cut`` (``power_cut.py``): the VM backend stops QEMU; the recovery runs in a second VM;
- ``flush-points`` (``flush_points.py``): dm-log-writes records the data disk's writes; the guest
  replays them up to chosen flush points and recovers each (the qemu backend).

This face is data only (the settings, the names, the crash record); ``modes.py`` binds each name
to its declaration (``modes.get``, ``modes.start``), on top of the cell and the workload contract.

Standard library only: the guest runs this too.
"""

from __future__ import annotations

from fsmatrix.agent.crash.event import MEASURE_START_MARKER, CrashEvent, RecoveryFailed, short
from fsmatrix.agent.crash.settings import MODES, CrashSettings

__all__ = [
    "MEASURE_START_MARKER",
    "MODES",
    "CrashEvent",
    "CrashSettings",
    "RecoveryFailed",
    "short",
]
