"""Fit checks (fsmatrix.agent.fit): matrix expand refuses a cell whose footprint exceeds its data
disk(s) less the filesystem's overhead, or whose database buffers exceed vm.memory less the guest's
own share; one line, exit 2. The layout counts: a stripe holds the sum of its disks, split-journal
puts the journal on its own disk."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import needs_root
from fsmatrix import matrix
from fsmatrix.agent import fit
from fsmatrix.agent.parsing import parse_cell, standalone_cell
from fsmatrix.agent.storage import filesystems
from fsmatrix.backends import host
from fsmatrix.backends.host import HostBackend
from fsmatrix.errors import UserError
from test_bad_input import expand_refuses, refused

WORKLOADS = {
    "threen1": "{threen1: {start: 1, end: 3000000}}",
    "pgbench": "{pgbench: {scale: 60}}",
    "sysbench": "{sysbench: {mode: rndrw, total_size: 3000M}}",
    "fio": "{fio: {pattern: randwrite, file_size: 700M, jobs: 4}}",
}


def _smallest_disk_mib(fs: str, need: int, disks: int = 1) -> int:
    """The smallest storage.disk_size in MiB whose filesystem holds ``need`` bytes."""
    usable = filesystems.get(fs).usable_bytes
    mib = 1
    while usable(mib * disks << 20) < need:
        mib += 1
    return mib


def _text(workload: str, disk_mib: int, extra: str = "") -> str:
    return (
        f"axes:\n  filesystem: [ext4]\n  workload: [{workload}]\ndefaults:\n  storage.disk_size: {disk_mib}M\n{extra}"
    )


def _footprint(workload: str) -> int:
    name = workload.split(":")[0].strip("{ ")
    cell = standalone_cell(name, yaml.safe_load(workload)[name])
    fp = fit.footprint(cell)
    assert fp is not None
    return fp.total


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_footprint_just_over_the_disk_is_refused_just_under_expands(tmp_path: Path, name: str) -> None:
    need = _footprint(WORKLOADS[name])
    disk = _smallest_disk_mib("ext4", need)
    path = tmp_path / "ok.yaml"
    path.write_text(_text(WORKLOADS[name], disk))
    assert len(matrix.load(path).cells) == 1
    line = expand_refuses(tmp_path, _text(WORKLOADS[name], disk - 1))
    assert f"storage.disk_size '{disk - 1}M'" in line and "on ext4" in line
    assert "raise storage.disk_size to at least" in line and f"lower workload.{name}." in line
    assert ":3:" in line  # the workload axis line


@pytest.mark.parametrize(
    ("settings", "held", "lower"),
    [
        (
            "  workload.threen1: {start: 1, end: 1000}\n  gtm: {global_buffers: 70000, block_size: 4096}\n",
            "(gtm.global_buffers, gtm.journal_buffers)",
            "gtm.global_buffers",
        ),
        (
            "  workload.pgbench: {scale: 1}\n  postgres.shared_buffers: 300M\n",
            "(postgres.shared_buffers, postgres.wal_buffers)",
            "postgres.shared_buffers",
        ),
    ],
)
def test_buffers_over_the_guest_memory_are_refused(tmp_path: Path, settings: str, held: str, lower: str) -> None:
    text = f"axes:\n  filesystem: [ext4]\ndefaults:\n  vm.memory: 512M\n{settings}"
    line = expand_refuses(tmp_path, text)
    assert held in line and "vm.memory '512M'" in line and f"raise vm.memory or lower {lower}" in line
    ok = tmp_path / "ok.yaml"
    ok.write_text(text.replace("512M", "1G"))
    assert len(matrix.load(ok).cells) == 1


def test_tmpfs_files_count_against_memory(tmp_path: Path) -> None:
    text = (
        "axes:\n  filesystem: [tmpfs]\ndefaults:\n  vm.memory: 1G\n  storage.disk_size: 2G\n"
        "  workload.sysbench: {mode: rndrw, total_size: 900M}\n"
    )
    assert "tmpfs files" in expand_refuses(tmp_path, text)


def test_split_journal_checks_each_part_against_its_own_disk(tmp_path: Path) -> None:
    workload = WORKLOADS["threen1"]
    cell = standalone_cell("threen1", {"start": 1, "end": 3000000})
    fp = fit.footprint(cell)
    assert fp is not None and fp.journal > 0
    disk = _smallest_disk_mib("ext4", max(fp.data, fp.journal))
    split = "  storage.layout: split-journal\n  storage.journal_filesystem: ext4\n"
    ok = tmp_path / "ok.yaml"
    ok.write_text(_text(workload, disk, split))
    assert len(matrix.load(ok).cells) == 1
    assert "to its data disk" in expand_refuses(tmp_path, _text(workload, disk, ""))  # single: data + journal
    # Disks big enough for the data but not for the journal (the larger part here):
    small = _smallest_disk_mib("ext4", fp.data)
    assert small < disk
    assert "to its journal disk" in expand_refuses(tmp_path, _text(workload, small, split))


def test_a_stripe_holds_the_sum_of_its_disks(tmp_path: Path) -> None:
    workload = WORKLOADS["sysbench"]
    need = _footprint(workload)
    disk = _smallest_disk_mib("ext4", need, disks=4)
    stripe = "  storage.layout: md-raid0\n  storage.stripe_disks: 4\n"
    ok = tmp_path / "ok.yaml"
    ok.write_text(_text(workload, disk, stripe))
    assert len(matrix.load(ok).cells) == 1
    line = expand_refuses(tmp_path, _text(workload, disk - 1, stripe))
    assert "x 4 disks (md-raid0)" in line


# --------------------------------------------------------------------------------------------
# the host backend: the host's memory and the workdir's free space, not vm.memory / disk_size


@needs_root
def test_host_backend_checks_host_memory_and_workdir_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "axes:\n  filesystem: [ext4]\ndefaults:\n  workload.threen1: {start: 1, end: 1000}\n"
        "  gtm: {global_buffers: 1000, block_size: 4096}\n"
    )
    cells = matrix.load(path).cells
    buffers = fit.buffers(cells[0].spec)
    monkeypatch.setattr(host, "memory_available", lambda: buffers - 1)
    with pytest.raises(UserError, match="available \\(MemAvailable\\); lower gtm.global_buffers or run it elsewhere"):
        HostBackend(workdir=tmp_path / "w").preflight(cells)
    monkeypatch.setattr(host, "memory_available", lambda: buffers + (1 << 30))
    HostBackend(workdir=tmp_path / "w").preflight(cells)
    # Loop files are sparse: what the cell writes must be free under the workdir, not disk_size.
    written = fit.footprint(cells[0].spec)
    assert written is not None
    monkeypatch.setattr(host.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(1 << 40, 0, written.total))  # type: ignore[attr-defined]
    with pytest.raises(UserError, match="the workdir has"):
        HostBackend(workdir=tmp_path / "w").preflight(cells)


def test_vm_disk_images_preallocated_take_their_whole_size() -> None:
    sparse = standalone_cell("sysbench", {"mode": "rndrw", "total_size": "64M"})
    full = parse_cell({**sparse.to_dict(), "storage": {"disk_size": "2G", "disk_allocation": "preallocated"}})
    assert fit.check_workdir_space([sparse], 200 << 20, vm_disks=True) is None  # 64 MiB + ext4's 64 MiB
    assert fit.check_workdir_space([full], 200 << 20) is None  # loop files: the footprint
    assert "writes up to 2,048 MiB" in (fit.check_workdir_space([full], 200 << 20, vm_disks=True) or "")


# --------------------------------------------------------------------------------------------
# a VM backend: the guest against the machine that runs it


def test_a_guest_bigger_than_its_host_is_named_by_its_setting() -> None:
    cell = standalone_cell("threen1", {"start": 1, "end": 1000})
    assert fit.check_vm_on_host(cell, 24 << 30, 2) is None  # the defaults: 2 vCPUs, 2G
    big = parse_cell({**cell.to_dict(), "vm": {"memory": "512G", "cpus": 2}})
    line = fit.check_vm_on_host(big, 24 << 30, 2)
    assert line is not None and line.startswith("vm.memory '512G' is more than this host's memory (24,576 MiB")
    many = parse_cell({**cell.to_dict(), "vm": {"memory": "1G", "cpus": 3}})
    assert fit.check_vm_on_host(many, 24 << 30, 2) == (
        "vm.cpus 3 is more than this host's 2 CPUs; lower vm.cpus or run the cell on a bigger host"
    )


@pytest.mark.parametrize("setting", ["memory", "cpus"])
def test_qemu_refuses_a_guest_bigger_than_this_host_before_any_vm(tmp_path: Path, setting: str) -> None:
    """`fsmatrix run --backend qemu`: one line naming the setting, exit 2, before an image or a VM."""
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("qemu-system-x86_64 is not installed (make deps installs it)")
    total = host.memory_total()
    # 1 GiB more than this host has; the most vCPUs the schema takes (256)
    vm = {"memory": f"{total // (1 << 20) + 1024}M", "cpus": 1} if setting == "memory" else {"cpus": 256}
    if setting == "cpus" and (os.cpu_count() or 1) >= 256:
        pytest.skip("this host has 256 CPUs: no vm.cpus is more")
    path = tmp_path / "m.yaml"
    defaults = {"workload.threen1": {"start": 1, "end": 1000}, "vm": vm}
    path.write_text(yaml.safe_dump({"axes": {"filesystem": ["ext4"]}, "defaults": defaults}))
    line = refused(
        "run", str(path), "--backend", "qemu", "--results", str(tmp_path / "r"), "--workdir", str(tmp_path / "w")
    )
    assert f"vm.{setting} " in line and "this host" in line and "bigger host" in line
    assert not list((tmp_path / "w").glob("**/*.qcow2")) and not list((tmp_path / "w").glob("**/*.img"))
