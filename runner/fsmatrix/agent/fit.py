"""Does a cell fit its disks and its memory? Checked when the cell is made (``Cell.check``, so by
``matrix expand`` and ``run`` before anything starts), from what the workload declares it writes
(``Workload.footprint``), what its database settings allocate (``SettingsBlock.memory``) and what
each filesystem leaves of a disk (``Filesystem.usable_bytes``).

The layout counts: a stripe (md-raid0, lvm-stripe) holds the sum of its disks; split-journal puts
the footprint's journal part on its own disk and filesystem. tmpfs holds its footprint in memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fsmatrix.agent import declare
from fsmatrix.agent.contract import Footprint
from fsmatrix.agent.declare import Invalid
from fsmatrix.agent.storage import filesystems

if TYPE_CHECKING:
    from fsmatrix.agent.cell import Cell

# What the guest itself needs of vm.memory (kernel, systemd, the agent, the page cache a run needs
# to make progress) before the database's buffers: Debian's cloud kernel boots in about 120 MiB.
GUEST_RESERVE = 256 << 20


def mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB"


def footprint(cell: Cell) -> Footprint | None:
    declared = cell.declaration.footprint
    return declared(cell) if declared is not None else None


def buffers(cell: Cell) -> int:
    """Bytes of shared memory the cell's database settings allocate."""
    total = 0
    for block in cell.declaration.settings:
        if block.memory is not None and block.name in cell.settings:
            total += block.memory(cell.settings[block.name])
    return total


def buffer_settings(cell: Cell) -> list[str]:
    """The dotted settings whose buffers ``buffers`` counts (``postgres.shared_buffers``, ...)."""
    return [
        f"{block.name}.{name}"
        for block in cell.declaration.settings
        if block.memory is not None and block.name in cell.settings
        for name in block.memory_settings
    ]


def memory_needed(cell: Cell) -> int:
    """What the cell holds in memory beyond the system's own: buffers, and a tmpfs's files."""
    held = 0
    if not cell.fs.device and cell.fs.mounts:  # tmpfs: the files are memory
        fp = footprint(cell)
        held = min(fp.total, declare.parse_size(cell.storage.disk_size)) if fp else 0
    return buffers(cell) + held


def check(cell: Cell) -> None:
    """Refuse (``Invalid``) a cell whose footprint exceeds its disks or whose memory exceeds vm.memory."""
    _check_disks(cell)
    needed = memory_needed(cell)
    memory = declare.parse_size(cell.vm.memory)
    if needed > memory - GUEST_RESERVE:
        held = buffer_settings(cell) + (["tmpfs files"] if not cell.fs.device and cell.fs.mounts else [])
        lower = buffer_settings(cell)[:1] or ["the tmpfs files (storage.disk_size)"]
        raise Invalid(
            "vm.memory",
            f"vm.memory {cell.vm.memory!r}: the cell holds {mib(needed)} in memory ({', '.join(held)}) but "
            f"{mib(memory)} less the guest's own {mib(GUEST_RESERVE)} leaves {mib(max(0, memory - GUEST_RESERVE))}; "
            f"raise vm.memory or lower {lower[0]}",
        )


def _check_disks(cell: Cell) -> None:
    fp = footprint(cell)
    if fp is None or not cell.fs.mounts:
        return  # raw: fio clamps each job's region to its share of the device
    fs, storage = cell.fs, cell.storage
    size = declare.parse_size(storage.disk_size)
    disks = storage.stripe_disks if storage.striped else 1
    journal_fs = storage.journal_on_own_filesystem
    wanted = [("data", fs, size * disks, fp.total if journal_fs is None else fp.data)]
    if journal_fs is not None:
        wanted.append(("journal", filesystems.get(journal_fs), size, fp.journal))
    for role, on, raw, need in wanted:
        usable = on.usable_bytes(raw)
        if need <= usable:
            continue
        across = f" x {disks} disks ({storage.layout})" if disks > 1 else ""
        overhead = f"{on.overhead_fraction:.0%} + {mib(on.overhead_bytes)}"
        raise Invalid(
            fp.setting,
            f"{fp.setting}: the cell writes up to {mib(need)} to its {role} disk, but storage.disk_size "
            f"{storage.disk_size!r}{across} leaves {mib(usable)} on {on.name} (overhead {overhead}); "
            f"raise storage.disk_size to at least {_disk_size_for(on, need, disks)} or lower {fp.setting}",
        )


def _disk_size_for(fs: filesystems.Filesystem, need: int, disks: int) -> str:
    """The smallest storage.disk_size (in whole MiB, or GiB from 1 GiB) that holds ``need`` bytes."""
    total = (need + fs.overhead_bytes) / (1 - fs.overhead_fraction) if fs.overhead_fraction < 1 else need
    per_disk = -(-int(total) // disks)
    return f"{-(-per_disk // (1 << 20))}M" if per_disk < (1 << 30) else f"{-(-per_disk // (1 << 30))}G"


def check_host_memory(cells: list[Cell], memory_available: int) -> str | None:
    """The host backend's memory fit, where vm.memory means nothing: the largest cell's buffers (and
    tmpfs files) against the host's available memory. A sentence saying what to change, or None."""
    largest = max(cells, key=memory_needed, default=None)
    if largest is None or memory_needed(largest) <= memory_available:
        return None
    held = buffer_settings(largest) + (["tmpfs files"] if not largest.fs.device and largest.fs.mounts else [])
    lower = ", ".join(buffer_settings(largest)[:1]) or "its tmpfs files (storage.disk_size)"
    return (
        f"a cell holds {mib(memory_needed(largest))} in memory ({', '.join(held) or 'buffers'}) but this host has "
        f"{mib(memory_available)} available (MemAvailable); lower {lower} or run it elsewhere"
    )


def check_vm_on_host(cell: Cell, memory_total: int, cpus: int) -> str | None:
    """A VM cell against the machine that runs it: a guest cannot have more memory or more vCPUs than
    its host (QEMU would fail to allocate, or crawl). A sentence naming the setting, or None."""
    memory = declare.parse_size(cell.vm.memory)
    if memory > memory_total:
        return (
            f"vm.memory {cell.vm.memory!r} is more than this host's memory ({mib(memory_total)}, MemTotal); "
            f"lower vm.memory or run the cell on a bigger host"
        )
    if cell.vm.cpus > cpus:
        return (
            f"vm.cpus {cell.vm.cpus} is more than this host's {cpus} CPUs; lower vm.cpus or run the cell on a "
            f"bigger host"
        )
    return None


def check_workdir_space(cells: list[Cell], workdir_free: int, vm_disks: bool = False) -> str | None:
    """The largest cell's writes against the free space where its disk files live (loop files, VM
    disk images): they are sparse, so what is written counts, not storage.disk_size; VM disks with
    storage.disk_allocation preallocated (``vm_disks``) take all of it."""
    written = max((_written(c, vm_disks) for c in cells), default=0)
    if written > workdir_free:
        return (
            f"a cell writes up to {mib(written)} to its disk files but the workdir has "
            f"{mib(workdir_free)} free; free space there, pass --workdir elsewhere or lower the cell's sizes"
        )
    return None


def _written(cell: Cell, vm_disks: bool = False) -> int:
    """What a cell writes to its disk files: its footprint and the filesystem's fixed metadata."""
    if vm_disks and cell.storage.disk_allocation == "preallocated":
        return declare.parse_size(cell.storage.disk_size) * cell.required_devices
    fp = footprint(cell)
    if fp is None or not cell.fs.device:
        return 0  # tmpfs: memory, counted above
    return fp.total + cell.fs.overhead_bytes
