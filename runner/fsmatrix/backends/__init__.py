"""Backends: the ways fsmatrix reaches a kernel to run a cell on (host, qemu)."""

from __future__ import annotations

from typing import Any, Protocol

from fsmatrix.matrix import Cell


class Backend(Protocol):
    name: str

    def preflight(self, cells: list[Cell]) -> None:
        """Refuse (UserError) before anything runs when the cells cannot run on this backend."""

    def run(self, cell: Cell, repeat: int) -> dict[str, Any]:
        """Run one repeat of a cell and return its result document."""

    def environment(self) -> dict[str, Any]:
        """Provenance this backend adds to every result (backend, accel, ...)."""
