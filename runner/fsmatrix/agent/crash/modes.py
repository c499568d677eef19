"""The crash modes bound: each name in ``MODES`` (``settings.py``) to its module's ``MODE``
declaration (``mode.CrashMode``), loaded by name. On top of the crash package: the declarations
name the cell and the workload contract, which name only the crash package's data."""

from __future__ import annotations

import functools

from fsmatrix.agent import declare
from fsmatrix.agent.crash.event import CrashEvent
from fsmatrix.agent.crash.mode import CrashMode, CrashRun
from fsmatrix.agent.crash.settings import MODES, CrashSettings


@functools.cache
def get(name: str) -> CrashMode:
    """The declaration of crash mode ``name``; ValueError for names not in the registry."""
    if name not in MODES:
        raise ValueError(f"unknown crash mode {name!r}; known: {', '.join(MODES)}")
    return declare.member(f"{__package__}.{MODES[name]}", "MODE", CrashMode, name)


def start(settings: CrashSettings, event: CrashEvent) -> CrashRun:
    """The hooks of one run of a crash cell, as its mode makes them."""
    return get(settings.mode).start(settings, event)
