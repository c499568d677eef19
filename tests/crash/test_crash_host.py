"""Crash modes' host sides behind one protocol (``backends/qemu/crash_host.py``): the backends name no mode.

Every crash mode whose guest side needs the host (extra disks, a longer limit, VMs of its own such as
one whose power is cut) has a host side in ``backends/qemu/`` registered in ``host_sides.py``; the
backends ask the cell's host side, never a mode by name. Checked here by reading ``backends/``: no
module but the modes' own host sides and the registry spells a crash mode's name (or its module's),
and the check fails on a planted one. tests/agent/test_plugins.py adds a mode with a host side of its
own (one module, one registry line) and runs it through the qemu backend's preflight and the host backend.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO
from fsmatrix.agent import crash
from fsmatrix.backends.libvirt import LibvirtBackend
from fsmatrix.backends.qemu import host_sides
from fsmatrix.backends.qemu.backend import QemuBackend
from fsmatrix.backends.qemu.crash_host import NO_HOST_SIDE, HostCrashMode
from fsmatrix.matrix import expand_document

BACKENDS = REPO / "runner" / "fsmatrix" / "backends"


def _patterns(mode: str, module: str) -> list[str]:
    """How code names a crash mode: quoted (its name or module), or its module as a word (when that is
    no common word: ``power_cut`` is always the mode, ``kill`` also a method) or reached through the crash package."""
    found = [rf"[\"']{re.escape(mode)}[\"']", rf"[\"']{re.escape(module)}[\"']", rf"\bcrash\.{module}\b"]
    found.append(rf"\bcrash import [\w, ]*\b{module}\b")
    if "_" in module:
        found.append(rf"\b{module}\b")
    return found


def crash_modes_named(backends: Path) -> list[str]:
    """``file:line: text`` of every line under ``backends`` that names a crash mode, outside the
    modes' own host-side modules and the registry (``host_sides.py``, one line per mode)."""
    exempt = {backends / "qemu" / f"{m}.py" for m in host_sides.MODULES} | {backends / "qemu" / "host_sides.py"}
    patterns = [re.compile(p) for name, module in crash.MODES.items() for p in _patterns(name, module)]
    hits = []
    for path in sorted(backends.rglob("*.py")):
        if path in exempt:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if any(p.search(line) for p in patterns):
                hits.append(f"{path.relative_to(backends)}:{number}: {line.strip()}")
    return hits


def test_no_backend_module_names_a_crash_mode() -> None:
    assert crash_modes_named(BACKENDS) == []


@pytest.mark.parametrize(
    "planted",
    [
        'if cell.spec.crash.mode == "power-cut":\n    pass',
        "from fsmatrix.backends.qemu import flush_points",
        "from fsmatrix.agent.crash import kill",
    ],
)
def test_the_name_check_finds_a_planted_name(tmp_path: Path, planted: str) -> None:
    copy = tmp_path / "backends"
    shutil.copytree(BACKENDS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "qemu" / "backend.py").open("a") as f:
        f.write(f"\n{planted}\n")
    hits = crash_modes_named(copy)
    assert len(hits) == 1 and hits[0].startswith("qemu/backend.py:"), hits


def test_every_host_side_serves_a_declared_mode() -> None:
    assert set(host_sides.HOST_SIDES) <= set(crash.MODES)
    assert all(isinstance(side, HostCrashMode) for side in host_sides.HOST_SIDES.values())
    assert all(side.mode == name for name, side in host_sides.HOST_SIDES.items())


def _cell(mode: str | None):  # type: ignore[no-untyped-def]
    entry = {
        "filesystem": "ext4",
        "workload": {"threen1": {"start": 1, "end": 2000, "workers": 2, "block": 100}},
        **({"crash": {"mode": mode, "after_s": 1}} if mode else {}),
    }
    return expand_document({"include": [entry], "defaults": {"timeout": 300}}, "m").cells[0]


def test_a_mode_without_a_host_side_gets_the_defaults(tmp_path: Path) -> None:
    """A mode the registry does not list (and a cell without a crash) needs nothing from the host."""
    without = [name for name in crash.MODES if name not in host_sides.HOST_SIDES]
    assert without  # a mode the guest does alone exists
    backend = QemuBackend(workdir=tmp_path)
    for cell in (_cell(without[0]), _cell(None)):
        assert host_sides.host_side(cell) is NO_HOST_SIDE
        assert backend.time_limit(cell) == 300 + backend.boot_allowance
        assert NO_HOST_SIDE.extra_disks(cell, tmp_path, create=True) == [] and not list(tmp_path.iterdir())


def test_libvirt_runs_only_the_modes_without_a_host_side() -> None:
    assert set(LibvirtBackend.crash_modes) == set(crash.MODES) - set(host_sides.HOST_SIDES)
