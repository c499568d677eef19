"""Kernel capabilities reported before a run (fsmatrix.agent.kernel): a filesystem, a layout's
driver or a crash mode's device-mapper target the backend's kernel lacks. The host backend asks the
running kernel (storage.prepare's checks); a VM backend the image's manifest, when it records them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from conftest import needs_root
from fsmatrix.agent import kernel
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.parsing import parse_cell
from fsmatrix.backends.host import HostBackend
from fsmatrix.matrix import expand_document

THREEN1 = {"start": 1, "end": 1000}


def _cell(**doc: object) -> Cell:
    return parse_cell({"filesystem": "ext4", "workload": {"threen1": THREEN1}, **doc})


def test_what_a_cell_needs_of_the_kernel() -> None:
    split = _cell(filesystem="xfs", storage={"layout": "split-journal", "journal_filesystem": "ext2"})
    assert kernel.filesystems_of(split) == ["xfs", "ext2"]
    assert kernel.modules_of(_cell(storage={"layout": "lvm-stripe"})) == ["dm_mod"]
    assert kernel.modules_of(_cell(storage={"layout": "md-raid0"})) == ["raid0"]
    assert kernel.modules_of(_cell(crash={"mode": "flush-points", "after_s": 5})) == ["dm_log_writes"]


def test_the_manifest_lists_decide_when_present() -> None:
    cell = _cell(filesystem="btrfs", storage={"layout": "md-raid0"})
    assert kernel.lacking_in_manifest(cell, {}) is None  # an image built before they were recorded
    full = {"filesystems": ["ext4", "btrfs"], "modules": ["raid0", "dm_mod"]}
    assert kernel.lacking_in_manifest(cell, full) is None
    assert kernel.lacking_in_manifest(cell, {"filesystems": ["ext4"], "modules": ["btrfs", "raid0"]}) is None
    lacking = kernel.lacking_in_manifest(cell, {"filesystems": ["ext4"], "modules": ["dm_mod"]})
    assert lacking == "the image's kernel has no filesystem btrfs, module raid0"


def test_each_cell_is_checked_against_its_own_image_manifest() -> None:
    manifests = {"debian12": {"filesystems": ["ext4", "btrfs"]}, "debian13": {"filesystems": ["ext4"]}}
    assert kernel.lacking_in_image(_cell(filesystem="btrfs"), manifests) is None  # debian12, the default
    on13 = _cell(filesystem="btrfs", image="debian13")
    assert kernel.lacking_in_image(on13, manifests) == "image debian13: the image's kernel has no filesystem btrfs"
    assert kernel.lacking_in_image(on13, {"debian12": manifests["debian12"]}) is None  # its image not prepared


def test_one_warning_names_the_reasons_and_cells() -> None:
    cells = [_cell(), _cell(filesystem="xfs"), _cell(filesystem="jfs")]
    text = kernel.report(cells, ["a", "b", "c"], lambda c: "no xfs" if c.filesystem == "xfs" else None)
    assert text == "1 cell(s) will be skipped: no xfs (1 cell, e.g. b)"
    assert kernel.report(cells, ["a", "b", "c"], lambda c: None) is None


@needs_root
def test_host_preflight_reports_what_the_kernel_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    doc = {"axes": {"filesystem": ["ext4", "xfs"]}, "defaults": {"workload.threen1": THREEN1}}
    cells = expand_document(doc, "t").cells
    monkeypatch.setattr(kernel, "filesystem_availability", lambda n: "not in /proc/filesystems" if n == "xfs" else None)
    with caplog.at_level(logging.WARNING, logger="fsmatrix"):
        HostBackend(workdir=tmp_path).preflight(cells)
    assert "1 cell(s) will be skipped: xfs: not in /proc/filesystems" in caplog.text


@needs_root
def test_host_preflight_counts_the_cells_only_a_vm_can_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A README audit's finding: the warning named jfs's cell and not the hdd profile's, skipped all the same.
    doc = {
        "axes": {"device.profile": ["native", "hdd"]},
        "defaults": {"filesystem": "ext4", "workload.threen1": THREEN1},
    }
    cells = expand_document(doc, "t").cells
    monkeypatch.setattr(kernel, "filesystem_availability", lambda n: None)
    with caplog.at_level(logging.WARNING, logger="fsmatrix"):
        HostBackend(workdir=tmp_path).preflight(cells)
    assert "1 cell(s) will be skipped: device profile 'hdd' needs a VM backend (--backend qemu)" in caplog.text
