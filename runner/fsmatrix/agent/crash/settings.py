"""A cell's ``crash`` block (``CrashSettings``) and the crash modes' names: the registry ``MODES``, as data.

At the bottom of the crash package: the cell (``agent/cell.py``) and the crash record (``event.py``)
use them; ``modes.py`` binds each name to its module's declaration. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsmatrix.agent.declare import setting

# The registry: a crash mode's name (the value of ``crash.mode``) -> its module in this package.
MODES: dict[str, str] = {
    "power-cut": "power_cut",
    "kill": "kill",
    "flush-points": "flush_points",
}


@dataclass(frozen=True)
class CrashSettings:
    """The cell's ``crash`` block; a cell without one is never crashed."""

    mode: str = setting(choices=tuple(MODES), help="kill: SIGKILL the database; power-cut, flush-points: VM backends")
    after_s: float = setting(minimum=0, exclusive_minimum=True, help="seconds into the measured workload")
    points: int = setting(10, minimum=1, maximum=100000, help="flush-points: how many flush points to replay to")
    seed: int = setting(0, minimum=0, help="flush-points: which flush points are chosen")
