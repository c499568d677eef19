"""A cell from its JSON form: the registries bound to the pure data of ``agent/cell.py``.

``parse_cell`` fills every default, checks each setting and the rules that span several (tmpfs has
no device to split, raw has no filesystem, a layout a workload does not support: from the fields of
``Filesystem`` and ``Workload``, raising ``declare.Invalid`` naming the setting at fault), and binds
the cell's declarations. On top of the agent's data: it imports the registries (workloads,
filesystems, crash modes), which import the cell; nothing it imports imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsmatrix.agent import declare
from fsmatrix.agent import options as option_rules
from fsmatrix.agent.cell import CELL_KEYS, LVM_EXTENT_BYTES, NATIVE, TIMEOUT_AUTO, Cell, Device, Options, Vm
from fsmatrix.agent.crash import modes as crash_modes
from fsmatrix.agent.crash.settings import CrashSettings
from fsmatrix.agent.declare import Invalid
from fsmatrix.agent.storage import filesystems, stripe
from fsmatrix.agent.storage.settings import SINGLE, SPLIT_JOURNAL, Storage
from fsmatrix.agent.workloads import WORKLOADS, all_workloads, get, settings_blocks


def parse_cell(doc: Mapping[str, Any]) -> Cell:
    """Parse a cell's JSON form (defaults filled here); Invalid names the setting at fault."""
    unknown = sorted(set(doc) - set(CELL_KEYS) - set(settings_blocks()))
    if unknown:
        raise Invalid(unknown[0], f"unknown setting(s) {', '.join(unknown)}")
    scalars = {k: doc[k] for k in ("filesystem", "mkfs_options", "mount_options", "timeout", "image") if k in doc}
    auto = scalars.get("timeout") == TIMEOUT_AUTO
    if auto:
        del scalars["timeout"]  # the default until the host side derives the limit
    options = declare.parse(Options, scalars, "cell")
    workload_doc = doc.get("workload")
    if not isinstance(workload_doc, Mapping) or len(workload_doc) != 1:
        raise Invalid("workload", f"workload must name exactly one of {', '.join(WORKLOADS)}, got {workload_doc!r}")
    ((name, values),) = workload_doc.items()
    if name not in WORKLOADS:
        raise Invalid("workload", f"workload: unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    workload = get(name)
    cell = Cell(
        filesystem=options.filesystem,
        workload=name,
        params=workload.parse_params(values),
        declaration=workload,
        fs=filesystems.get(options.filesystem),
        mkfs_options=options.mkfs_options,
        mount_options=options.mount_options,
        image=options.image,
        storage=declare.parse(Storage, doc.get("storage"), "storage"),
        device=declare.parse(Device, doc.get("device"), "device"),
        vm=declare.parse(Vm, doc.get("vm"), "vm"),
        timeout=options.timeout,
        timeout_auto=auto,
        # A block the workload does not own means nothing to it and is dropped (GT.M settings
        # in a matrix that also runs fio); one it owns is filled with its defaults.
        settings={b.name: declare.parse(b.settings, doc.get(b.name), b.name) for b in workload.settings},
        crash=None if doc.get("crash") is None else declare.parse(CrashSettings, doc["crash"], "crash"),
    )
    check_cell(cell)
    return cell


def standalone_cell(workload: str, params: Mapping[str, Any], **blocks: Mapping[str, Any] | None) -> Cell:
    """A cell for running a workload outside a matrix (``fsmatrix workload NAME``, tests)."""
    doc: dict[str, Any] = {"filesystem": filesystems.FILESYSTEMS[0], "workload": {workload: dict(params)}}
    doc.update({k: v for k, v in blocks.items() if v is not None})
    return parse_cell(doc)


def check_cell(cell: Cell) -> None:
    """Contradictions between settings that no single field can express."""
    fs, workload, layout = cell.fs, cell.declaration, cell.storage.layout
    if not fs.mounts:
        if workload.needs_filesystem:
            runs_raw = ", ".join(w.name for w in all_workloads() if not w.needs_filesystem) or "none"
            raise Invalid(
                "filesystem",
                f"filesystem {fs.name!r} runs {runs_raw} on the block device itself; "
                f"{workload.name} needs a filesystem",
            )
        for key in ("mkfs_options", "mount_options"):
            if getattr(cell, key):
                raise Invalid(key, f"{key}: filesystem {fs.name!r} has no filesystem; remove them")
        if layout == SPLIT_JOURNAL:
            raise Invalid("storage.layout", f"storage.layout 'split-journal' needs a filesystem, not {fs.name!r}")
    elif not fs.mkfs and cell.mkfs_options:
        raise Invalid("mkfs_options", f"mkfs_options: {fs.name} has no mkfs; remove them")
    # Options only: a path or a positional argument here would reach mkfs / mount past every device check.
    if fs.mkfs:
        try:
            option_rules.check_mkfs_options(fs.mkfs[0], fs.mkfs_getopt, cell.mkfs_options)
        except ValueError as exc:
            message = f"mkfs_options {cell.mkfs_options!r}: {exc}; allowed: {option_rules.MKFS_ALLOWED}"
            raise Invalid("mkfs_options", message) from exc
    for key, text in (
        ("mount_options", cell.mount_options),
        ("storage.journal_mount_options", cell.storage.journal_mount_options),
    ):
        try:
            option_rules.check_mount_options(text)
        except ValueError as exc:
            raise Invalid(key, f"{key} {text!r}: {exc}; allowed: {option_rules.MOUNT_ALLOWED}") from exc
    _check_sizes(cell)
    if not fs.device:
        if layout != SINGLE:
            message = f"storage.layout: {fs.name} has no device to split; use layout 'single'"
            raise Invalid("storage.layout", message)
        if cell.device.profile != NATIVE:
            raise Invalid("device.profile", f"device.profile: {fs.name} has no device to shape; use 'native'")
    if layout == SPLIT_JOURNAL and workload.journal is None:
        with_journal = ", ".join(w.name for w in all_workloads() if w.journal) or "none"
        raise Invalid(
            "storage.layout",
            f"storage.layout 'split-journal' puts a database journal on its own device: "
            f"{workload.name} has none (workloads with one: {with_journal})",
        )
    if cell.crash is not None:
        _check_crash(cell, cell.crash)


def _check_crash(cell: Cell, crash: CrashSettings) -> None:
    workload = cell.declaration
    if workload.recover is None:
        recoverable = ", ".join(w.name for w in all_workloads() if w.recover) or "none"
        raise Invalid(
            "crash",
            f"crash: {workload.name} cannot recover from a crash yet (workloads that can: {recoverable}); "
            "remove the crash setting",
        )
    mode = crash_modes.get(crash.mode)
    refused = mode.refuses(cell) if mode.refuses is not None else None
    if refused is not None:
        raise Invalid(*refused)


def _check_sizes(cell: Cell) -> None:
    """Sizes the kernel or the tools would refuse mid-run, refused up front instead."""
    size = declare.parse_size(cell.storage.disk_size)
    if size <= 0:
        raise Invalid("storage.disk_size", f"storage.disk_size {cell.storage.disk_size!r}: must be more than 0")
    striped = cell.storage.striped
    data_bytes = size * cell.storage.stripe_disks if striped else size
    for role, name, available in (
        ("data", cell.filesystem, data_bytes),
        ("journal", cell.storage.journal_on_own_filesystem, size),
    ):
        least = filesystems.get(name).min_device_bytes if name else 0
        if least and available < least:
            raise Invalid(
                "storage.disk_size",
                f"storage.disk_size {cell.storage.disk_size!r}: mkfs of {name} ({role}) needs at least "
                f"{least >> 20} MiB",
            )
    if not striped:
        return
    chunk = declare.parse_size(cell.storage.stripe_size)
    try:
        stripe.stripe_bytes(chunk)
    except ValueError as exc:
        raise Invalid("storage.stripe_size", f"{exc} (md and LVM refuse anything else)") from exc
    if chunk > size:
        raise Invalid(
            "storage.stripe_size", f"storage.stripe_size {cell.storage.stripe_size!r} exceeds storage.disk_size"
        )
    if cell.storage.layout == "lvm-stripe" and chunk > LVM_EXTENT_BYTES:
        raise Invalid(
            "storage.stripe_size",
            f"storage.stripe_size {cell.storage.stripe_size!r}: LVM stripes at most one extent "
            f"({LVM_EXTENT_BYTES >> 20} MiB; lvcreate would quietly use that instead)",
        )
