"""What a run's VM boots: the guest image its cell names (``GuestImage``: built or found once) and,
with ``vm.kernel``, that kernel prepared for direct boot (``Kernels``: once per content)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fsmatrix.agent import proc
from fsmatrix.backends import image
from fsmatrix.backends.qemu import kernel_boot
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell

log = logging.getLogger("fsmatrix")


@dataclass(frozen=True)
class GuestImage:
    """A guest image as built: its files, its sha256 and its manifest."""

    paths: image.ImagePaths
    sha256: str
    manifest: dict[str, Any]


def build_image(name: str, echo: Callable[[str], None]) -> GuestImage:
    """Image ``name`` built, or found in the cache (well under a second)."""
    try:
        paths = image.build(echo=echo, image=name)
    except proc.CommandError as exc:
        raise UserError(f"cannot build the guest image {name}: {exc}") from exc
    return GuestImage(paths, paths.sha256.read_text().split()[0], json.loads(paths.manifest.read_text()))


class Kernels:
    """vm.kernel (and vm.modules) as a cell says them -> that kernel, prepared for direct boot."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self._echo = echo
        self._prepared: dict[tuple[str, str], kernel_boot.PreparedKernel] = {}

    def of(self, cell: MatrixCell) -> kernel_boot.PreparedKernel | None:
        """The cell's vm.kernel, prepared for direct boot (once per content; None: the image's kernel)."""
        vm = cell.spec.vm
        if not vm.kernel:
            return None
        key = (vm.kernel, vm.modules)
        if key not in self._prepared:
            try:
                self._prepared[key] = kernel_boot.prepare(vm.kernel, vm.modules, image.cache_root(), self._echo)
            except proc.CommandError as exc:
                raise UserError(f"cannot prepare vm.kernel {vm.kernel!r}: {exc}") from exc
        return self._prepared[key]

    def prepared(self, cell: MatrixCell) -> kernel_boot.PreparedKernel | None:
        """The cell's vm.kernel when it has been prepared already (None otherwise)."""
        return self._prepared.get((cell.spec.vm.kernel, cell.spec.vm.modules))

    def check(self, cells: list[MatrixCell], backend: str, own_kernel: bool) -> None:
        """Prepare every vm.kernel of ``cells`` before any VM starts, and refuse (exit 2) one that is
        missing, no kernel, or without a module a cell needs (``backend``: its name; ``own_kernel``:
        whether it boots a cell's vm.kernel at all)."""
        if cells and not own_kernel:
            raise UserError(
                f"cell {cells[0].id}: vm.kernel is booted by the qemu backend only, not by {backend}; "
                "run it with --backend qemu"
            )
        for cell in cells:
            try:
                prepared = self.of(cell)
            except UserError as exc:
                raise UserError(f"cell {cell.id}: {exc}") from exc
            assert prepared is not None
            missing = prepared.lacking(cell.spec)
            if missing:
                raise UserError(
                    f"cell {cell.id}: vm.kernel {cell.spec.vm.kernel!r} ({prepared.release}) has no module "
                    f"{missing}, loadable or built in; the cell needs it (give a kernel that has it, "
                    "or leave the cell out)"
                )
