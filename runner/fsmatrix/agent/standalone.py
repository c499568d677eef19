"""Running a workload outside a matrix: in an existing directory, no mkfs (`fsmatrix workload NAME`)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import Outcome, Workload, Workspace


def run_in_directory(workload: Workload[Any, Cell], cell: Cell, directory: Path, timeout: float) -> Outcome:
    """Run a workload directly in an existing ``directory`` (no matrix, no mkfs); scratch in /tmp.
    ``cell``: a standalone cell (``parsing.standalone_cell``)."""
    if not directory.is_dir():
        raise NotADirectoryError(f"{workload.name}: {directory} is not a directory")
    with tempfile.TemporaryDirectory(prefix=f"fsmatrix-{workload.name}-") as scratch:
        ws = Workspace(data=directory, journal=directory, scratch=Path(scratch))
        return workload.run_cell(cell, ws, timeout)
