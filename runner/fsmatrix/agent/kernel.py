"""What a cell needs of the kernel (its filesystems, its layout's driver, its crash mode's target),
checked by the backends before a run starts: the host backend against the running kernel, a VM
backend against the image's manifest. A cell the kernel cannot run is still recorded as skipped by
``storage.prepare`` when its turn comes; this reports it up front."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fsmatrix.agent.crash import modes as crash_modes
from fsmatrix.agent.storage import filesystem_availability, filesystems, stripe

if TYPE_CHECKING:
    from fsmatrix.agent.cell import Cell


def filesystems_of(cell: Cell) -> list[str]:
    """The filesystems a cell mounts (the data's and a split-off journal's)."""
    names = [cell.filesystem, cell.storage.journal_on_own_filesystem]
    return [n for n in dict.fromkeys(names) if n and filesystems.get(n).mounts]


def modules_of(cell: Cell) -> list[str]:
    """Kernel modules (names with underscores) the cell's layout and crash mode need."""
    wanted = [stripe.KERNEL_MODULES.get(cell.storage.layout)]
    if cell.crash is not None:
        wanted.append(crash_modes.get(cell.crash.mode).kernel_module)
    return [m for m in wanted if m]


def lacking_in_manifest(cell: Cell, manifest: Mapping[str, Any]) -> str | None:
    """What the image's kernel lacks for ``cell``, from the manifest's ``filesystems`` (types the
    kernel registers or has modules for) and ``modules`` (loadable and built-in, underscored) lists;
    None when it lacks nothing, or the manifest does not record them (images built before they were)."""
    known_fs, known_modules = manifest.get("filesystems"), manifest.get("modules")
    missing = []
    for name in filesystems_of(cell):
        module = filesystems.get(name).kernel_module
        if known_fs is not None and name not in known_fs and not (known_modules and module in known_modules):
            missing.append(f"filesystem {name}")
    if known_modules is not None:
        missing += [f"module {m}" for m in modules_of(cell) if m not in known_modules]
    return f"the image's kernel has no {', '.join(missing)}" if missing else None


def lacking_in_image(cell: Cell, manifests: Mapping[str, Mapping[str, Any]]) -> str | None:
    """What the kernel of the cell's image lacks for it, from ``manifests`` (image name -> its
    manifest), named by image; None when it lacks nothing or its image's manifest is not there."""
    manifest = manifests.get(cell.image)
    reason = lacking_in_manifest(cell, manifest) if manifest is not None else None
    return f"image {cell.image}: {reason}" if reason else None


def lacking_here(cell: Cell, cache: dict[str, str | None]) -> str | None:
    """What the running kernel (or its tools) lacks for ``cell``: the checks ``storage.prepare``
    makes (modprobe included), each asked once per ``cache``."""
    reasons = []
    for name in filesystems_of(cell):
        if name not in cache:
            cache[name] = filesystem_availability(name)
        reasons.append(cache[name] and f"{name}: {cache[name]}")
    if cell.storage.striped:
        layout = cell.storage.layout
        if layout not in cache:
            cache[layout] = stripe.availability(layout)
        reasons.append(cache[layout] and f"{layout}: {cache[layout]}")
    found = [r for r in reasons if r]
    return "; ".join(found) if found else None


def report(cells: list[Cell], ids: list[str], lacking: Any) -> str | None:
    """One warning for the cells ``lacking(cell)`` finds wanting (they will be recorded as skipped)."""
    found: dict[str, list[str]] = {}
    for cell, cell_id in zip(cells, ids, strict=True):
        reason = lacking(cell)
        if reason:
            found.setdefault(reason, []).append(cell_id)
    if not found:
        return None
    parts = [f"{reason} ({len(c)} cell{'s' * (len(c) > 1)}, e.g. {c[0]})" for reason, c in found.items()]
    return f"{sum(map(len, found.values()))} cell(s) will be skipped: " + "; ".join(parts)
