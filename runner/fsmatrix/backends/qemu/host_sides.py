"""The registry of crash modes' host sides (``crash_host.HostCrashMode``): one line per mode that
has one, its module in ``backends/qemu/`` (which declares ``HOST_SIDE``). A mode not listed needs
nothing from outside the VM (``NO_HOST_SIDE``). Loaded by name, as the agent's registries are."""

from __future__ import annotations

import importlib

from fsmatrix.backends.qemu.crash_host import NO_HOST_SIDE, HostCrashMode
from fsmatrix.matrix import MatrixCell

MODULES = (
    "power_cut",
    "flush_points",
)


def _load(module: str) -> HostCrashMode:
    side = importlib.import_module(f"{__package__}.{module}").HOST_SIDE
    assert isinstance(side, HostCrashMode), f"{module}.HOST_SIDE is no HostCrashMode"
    return side


HOST_SIDES: dict[str, HostCrashMode] = {side.mode: side for side in map(_load, MODULES)}


def host_side(cell: MatrixCell) -> HostCrashMode:
    """The host side of the cell's crash mode (``NO_HOST_SIDE`` for a cell without one, or no crash)."""
    return HOST_SIDES.get(cell.spec.crash.mode, NO_HOST_SIDE) if cell.spec.crash is not None else NO_HOST_SIDE
