"""The measured window holds its own writeback and no one else's (issue 51): run_job syncs the
filesystems under test when the window starts and before it ends. Before that, what a workload
wrote without fsync was written back by the kernel's flusher in the window or after it, as timing
fell (GT.M's database blocks made the PR cells' device bytes per operation bimodal), and what the
setup left dirty could land in the window. On a real ext4 on a loop device."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import attached_under, mounted_under, needs_root
from fsmatrix.agent import oscache, provenance
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import Outcome, Workspace
from fsmatrix.agent.job import CellRepeat, Job, run_job
from fsmatrix.agent.parsing import parse_cell
from fsmatrix.agent.storage import loop_devices

pytestmark = needs_root

WRITTEN = 16 << 20  # bytes the test workloads write without fsync
BLOCK = 4096
OPERATIONS = WRITTEN // BLOCK


def _write_unsynced(path: Path) -> None:
    """WRITTEN bytes in BLOCK writes, no fsync: they stay in the page cache until written back."""
    chunk = os.urandom(BLOCK)
    with open(path, "wb") as fh:
        for _ in range(OPERATIONS):
            fh.write(chunk)


def _outcome() -> Outcome:
    return Outcome(metrics={"ios": OPERATIONS}, verification={"status": "passed"})


def writes_in_the_window(cell: Cell, ws: Workspace, timeout: float) -> Outcome:
    """A workload whose measured part writes WRITTEN bytes and ends without fsync."""
    with ws.measure():
        _write_unsynced(ws.data / "measured")
    return _outcome()


def setup_leaves_dirty_pages(cell: Cell, ws: Workspace, timeout: float) -> Outcome:
    """A workload whose setup writes WRITTEN bytes without fsync, and whose measured part writes
    nothing and syncs its filesystem: the writeback the kernel's flusher may start at any moment."""
    _write_unsynced(ws.data / "setup")
    with ws.measure():
        oscache.sync_filesystems([ws.data])
    return _outcome()


@pytest.fixture
def device() -> Iterator[tuple[str, Path]]:
    """One loop device and a working directory for a job (on /var/tmp: loop images need a disk)."""
    with tempfile.TemporaryDirectory(prefix="fsmatrix-window-", dir="/var/tmp") as d:
        base = Path(d)
        with loop_devices(1, 256 << 20, base) as (loop,):
            yield loop, base / "job"
        assert attached_under(base) == [] and mounted_under(base) == []


def _run(device: tuple[str, Path], run_cell: Any) -> dict[str, Any]:
    """run_job on a fio cell whose workload is ``run_cell`` (one operation: a BLOCK write)."""
    cell = parse_cell({"filesystem": "ext4", "workload": {"fio": {"pattern": "write"}}})
    declaration = dataclasses.replace(cell.declaration, run_cell=run_cell)
    loop, workdir = device
    doc = run_job(Job(CellRepeat(dataclasses.replace(cell, declaration=declaration), "w", 1), [loop], workdir, {}))
    assert doc["status"] == "passed", doc["reason"]
    assert doc["provenance"]["work_measurement"] == provenance.WORK_MEASUREMENT
    assert "synced at both ends" in provenance.WORK_MEASUREMENT
    return doc


def test_the_workloads_writeback_is_counted_in_its_window(device: tuple[str, Path]) -> None:
    doc = _run(device, writes_in_the_window)
    # Without the sync at the window's end the data was still in the page cache: a few KiB of
    # metadata counted, the 16 MiB written back after the window.
    assert doc["metrics"]["device_write_bytes"] >= WRITTEN
    assert doc["metrics"]["device_write_bytes_per_op"] >= BLOCK


def test_the_setups_writeback_stays_out_of_the_window(device: tuple[str, Path]) -> None:
    doc = _run(device, setup_leaves_dirty_pages)
    # Without the sync at the window's start the setup's 16 MiB were written back inside it.
    assert doc["metrics"]["device_write_bytes"] < WRITTEN // 4
