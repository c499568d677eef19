"""How long cells will take, from the runs a results root holds for this host.

A cell's estimate is the median ``duration_s`` of its own passed runs on this host (the same cell id:
the same settings); without any, the median of the passed runs of the same workload with the same
parameters on another filesystem (or with other filesystem options): "from ext4"; else unknown.
"This host" is ``provenance.host.machine_id`` (backends/hostinfo.py: a hash of the DMI product UUID
or /etc/machine-id), a column of the results root's store (``store.past_runs``: its ``host``).

The same history gives ``timeout: auto`` its limit (``auto_timeout``): a multiple of the cell's
slowest stored passed run here, never below a floor.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fsmatrix.results.store.past_runs import StoredRun, sibling_key

UNKNOWN = "unknown"
# timeout: auto: this many times the slowest stored passed run of the cell here, and at least
# AUTO_FLOOR_S (a first run, or a cell that ran in seconds, still gets a minute to start and stop).
AUTO_FACTOR = 3.0
AUTO_FLOOR_S = 60.0
AUTO_DEFAULT_S = 3600  # without history: the `timeout` setting's own default


@dataclass(frozen=True)
class Estimate:
    seconds: float | None  # None: unknown
    source: str  # for people: "median of 5 runs", "from ext4 (3 runs)", "unknown"
    runs: int = 0  # how many stored runs it is from
    slowest_own_s: float | None = None  # the cell's own slowest stored passed run (timeout: auto)

    def show(self) -> str:
        if self.seconds is None:
            return UNKNOWN
        return f"{duration(self.seconds)} ({self.source})"


def estimate(cell_id: str, params: Mapping[str, Any], runs: list[StoredRun]) -> Estimate:
    """One cell's estimate (module docstring): its own runs, else its siblings', else unknown."""
    own = [r.duration_s for r in runs if r.cell_id == cell_id]
    if own:
        return Estimate(statistics.median(own), f"median of {_runs(len(own))}", len(own), max(own))
    key, filesystem = sibling_key(params), str(params.get("filesystem"))
    by_filesystem: dict[str, list[float]] = {}
    for r in runs:
        if r.sibling_key == key and r.cell_id != cell_id:
            by_filesystem.setdefault(r.filesystem, []).append(r.duration_s)
    if not by_filesystem:
        return Estimate(None, UNKNOWN)
    # The filesystem with the most runs (of equals, the first by name): one source, said by name.
    source, values = max(sorted(by_filesystem.items()), key=lambda item: len(item[1]))
    label = f"from {source}" if source != filesystem else f"from {source} with other options"
    return Estimate(statistics.median(values), f"{label}, {_runs(len(values))}", len(values))


def estimates(cells: Iterable[tuple[str, Mapping[str, Any]]], runs: list[StoredRun]) -> dict[str, Estimate]:
    """Cell id -> its estimate, for (id, params) pairs."""
    return {cell_id: estimate(cell_id, params, runs) for cell_id, params in cells}


@dataclass(frozen=True)
class Total:
    seconds: float  # the runs left with an estimate, added up
    runs: int  # the runs left
    unknown_runs: int  # of those, the ones without an estimate (not in ``seconds``)

    def show(self, at_most: bool = False) -> str:
        """``at_most``: the runs are a maximum (a race may stop earlier)."""
        if self.runs and self.unknown_runs == self.runs:
            return f"no estimate for {_runs(self.runs)} (no stored run of these cells or their workloads here)"
        text = f"{'at most ' if at_most else ''}estimated {duration(self.seconds)} for {_runs(self.runs)}"
        if self.unknown_runs:
            text += f" ({self.unknown_runs} of them unknown, not counted)"
        return text


def total(found: Mapping[str, Estimate], runs_left: Mapping[str, int]) -> Total:
    """The whole matrix: each cell's estimate times the runs it has left (its repeats, or for a
    resumed run those not complete yet)."""
    seconds, unknown = 0.0, 0
    for cell_id, count in runs_left.items():
        value = found[cell_id].seconds if cell_id in found else None
        if value is None:
            unknown += count
        else:
            seconds += value * count
    return Total(seconds, sum(runs_left.values()), unknown)


# How close an estimate must come to count as right: issue 27's "within ±30 %".
MARGIN = 0.3


@dataclass(frozen=True)
class Accuracy:
    """One cell of a run against the estimate it had before that run."""

    cell_id: str
    estimate: Estimate
    actual_s: float  # the median duration of the cell's passed runs in that run

    def error(self) -> float | None:
        """(actual - estimate) / estimate; None without an estimate."""
        if self.estimate.seconds is None or self.estimate.seconds <= 0:
            return None
        return (self.actual_s - self.estimate.seconds) / self.estimate.seconds

    def within(self, margin: float = MARGIN) -> bool:
        """Within ±``margin`` of its estimate (a cell without one is not)."""
        e = self.error()
        return e is not None and abs(e) <= margin


def accuracy(found: Mapping[str, Estimate], actual: Mapping[str, list[float]]) -> list[Accuracy]:
    """Each cell that has passed runs in ``actual`` (cell id -> their durations) against its estimate
    in ``found`` (unknown when it had none)."""
    return [
        Accuracy(cell_id, found.get(cell_id, Estimate(None, UNKNOWN)), statistics.median(durations))
        for cell_id, durations in actual.items()
        if durations
    ]


def auto_timeout(found: Estimate) -> tuple[int, str]:
    """``timeout: auto``'s limit in seconds and why (the result's ``timeout_source``)."""
    if found.slowest_own_s is None:
        return AUTO_DEFAULT_S, f"auto: no stored passed run of this cell here; the default {AUTO_DEFAULT_S} s"
    limit = max(AUTO_FLOOR_S, AUTO_FACTOR * found.slowest_own_s)
    why = f"auto: {AUTO_FACTOR:g}x slowest of {_runs(found.runs, 'stored run')} ({found.slowest_own_s:.1f} s)"
    if limit == AUTO_FLOOR_S:
        why += f", raised to the floor of {AUTO_FLOOR_S:g} s"
    return math.ceil(limit), why


def duration(seconds: float) -> str:
    """12 s, 4 min 10 s, 2 h 05 min."""
    s = round(seconds)
    if s < 60:
        return f"{seconds:.0f} s" if seconds >= 1 else f"{seconds:.1f} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _runs(n: int, noun: str = "run") -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"
