"""Workloads: each module runs one benchmark tool against a prepared workspace and parses its output.

Every workload module declares one ``WORKLOAD = Workload(...)``: everything the rest of fsmatrix
knows about it (parameters with defaults and bounds, key metrics, primary metric, cell-id slug,
report rows, what one operation is, packages, the database settings block it owns, ...). The
registry is the ``WORKLOADS`` tuple below: adding a workload is one module and one line there.
See docs/adding-a-workload.md.

The entry point is ``WORKLOAD.run_cell(cell, workspace, timeout) -> Outcome``: ``cell`` is the
parsed, typed cell (``fsmatrix.agent.cell.Cell``); ``cell.params`` is an instance of the
workload's ``params`` dataclass, ``cell.settings[block]`` one of each settings block it owns.
"""

from __future__ import annotations

import functools
from typing import Any

from fsmatrix.agent import declare
from fsmatrix.agent.contract import SettingsBlock, Workload

# The registry: one line per workload module in this package, in the order reports list them.
WORKLOADS: tuple[str, ...] = (
    "threen1",
    "sysbench",
    "fio",
    "pgbench",
)


@functools.cache
def get(name: str) -> Workload[Any, Any]:
    """The declaration of workload ``name``; ValueError for names not in the registry."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    return declare.member(f"{__name__}.{name}", "WORKLOAD", Workload, name)


def all_workloads() -> list[Workload[Any, Any]]:
    return [get(name) for name in WORKLOADS]


def settings_blocks() -> dict[str, SettingsBlock]:
    """Every settings block some workload owns, by name."""
    return {b.name: b for w in all_workloads() for b in w.settings}
