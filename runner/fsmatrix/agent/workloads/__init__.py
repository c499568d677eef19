"""Workloads: each module runs one benchmark tool against a prepared workspace and parses its output.

Every workload module exposes:

- ``KEY_METRICS``: ``{metric name: "lower" | "higher"}``, the metrics a comparison looks at and
  which direction is better;
- ``run_cell(cell, workspace, timeout) -> Outcome``: run the workload the cell describes
  (``cell["workload"][<name>]`` holds its parameters, fully defaulted by the matrix layer).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Workspace:
    """Where a workload may write."""

    data: Path  # a directory on the filesystem under test
    journal: Path  # where a database journal / WAL goes (== data unless the layout splits it)
    scratch: Path  # per-run directory *off* the device under test: logs, temporary files
    # Wrap the measured part (not layout, prepare or cleanup) in ``with ws.measure():`` so the
    # sampler's totals cover only it. Without a sampler it does nothing.
    measure: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    # Filesystem "raw": the block device the workload runs on (data is then an empty directory on
    # no filesystem under test). None when there is a filesystem.
    device: str | None = None


@dataclass
class Outcome:
    """What a workload hands back. Numbers in ``metrics`` are plain floats/ints, units in the name."""

    metrics: dict[str, float | int]
    verification: dict[str, Any]  # {"status": "passed" | "failed" | "not-applicable", ...}
    details: dict[str, Any] = field(default_factory=dict)  # everything else parsed from the tool
    versions: dict[str, str] = field(default_factory=dict)  # versions of tools that affect numbers


def run_in_directory(
    run_cell: Callable[[Mapping[str, Any], Workspace, float], Outcome],
    kind: str,
    params: Mapping[str, Any],
    directory: Path,
    timeout: float,
) -> Outcome:
    """Run a file workload directly in an existing ``directory`` (no matrix, no mkfs); scratch in /tmp."""
    if not directory.is_dir():
        raise NotADirectoryError(f"{kind}: {directory} is not a directory")
    with tempfile.TemporaryDirectory(prefix=f"fsmatrix-{kind}-") as scratch:
        ws = Workspace(data=directory, journal=directory, scratch=Path(scratch))
        return run_cell({"workload": {kind: dict(params)}}, ws, timeout)
