"""Crash recovery: crash a cell's run on purpose, recover, and prove what survived.

A cell with a ``crash`` block (``Settings``) is crashed ``after_s`` seconds into its *measured*
part (or, for modes that replay, at chosen points), then recovered by its workload's ``recover``
hook, which checks the database's integrity and resumes the work. The result's ``crash`` section is
the ``CrashEvent`` (``event.py``).

The modes: one module each, declaring ``MODE = CrashMode(...)`` (``mode.py``: what the mode does
around a run, through a few hooks ``job.run_job`` calls), and one line each in ``MODES`` below:

- ``kill`` (``kill.py``): SIGKILL the run's processes; works on every backend;
- ``power-cut`` (``power_cut.py``): the VM backend stops QEMU; the recovery runs in a second VM;
- ``flush-points`` (``flush_points.py``): dm-log-writes records the data disk's writes; the guest
  replays them up to chosen flush points and recovers each (the qemu backend).

Standard library only: the guest runs this too.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from fsmatrix.agent import declare
from fsmatrix.agent.crash.event import MEASURE_START_MARKER, CrashEvent, RecoveryFailed, short
from fsmatrix.agent.crash.mode import CrashMode, CrashNotInjected, CrashRun
from fsmatrix.agent.declare import setting

# The registry: a crash mode's name (the value of ``crash.mode``) -> its module in this package.
MODES: dict[str, str] = {
    "power-cut": "power_cut",
    "kill": "kill",
    "flush-points": "flush_points",
}

__all__ = [
    "MEASURE_START_MARKER",
    "MODES",
    "CrashEvent",
    "CrashMode",
    "CrashNotInjected",
    "CrashRun",
    "RecoveryFailed",
    "Settings",
    "get",
    "short",
    "start",
]


@dataclass(frozen=True)
class Settings:
    """The cell's ``crash`` block; a cell without one is never crashed."""

    mode: str = setting(choices=tuple(MODES), help="kill: SIGKILL the database; power-cut, flush-points: VM backends")
    after_s: float = setting(minimum=0, exclusive_minimum=True, help="seconds into the measured workload")
    points: int = setting(10, minimum=1, maximum=100000, help="flush-points: how many flush points to replay to")
    seed: int = setting(0, minimum=0, help="flush-points: which flush points are chosen")


@functools.cache
def get(name: str) -> CrashMode:
    """The declaration of crash mode ``name``; ValueError for names not in the registry."""
    if name not in MODES:
        raise ValueError(f"unknown crash mode {name!r}; known: {', '.join(MODES)}")
    return declare.member(f"{__name__}.{MODES[name]}", "MODE", CrashMode, name)


def start(settings: Settings, event: CrashEvent) -> CrashRun:
    """The hooks of one run of a crash cell, as its mode makes them."""
    return get(settings.mode).start(settings, event)
