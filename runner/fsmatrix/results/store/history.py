"""A store's results as series over time (``fsmatrix history``): per cell × hardware class × key
metric, one point per stored passed run, oldest first. The decisions on them (change points, what
changed) are the verdicts' (``verdict/history.py``); this module only reads.

A series never mixes hardware classes: a cell on two kinds of machine is two series, as in a report.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from fsmatrix.errors import UserError
from fsmatrix.results.store.database import Store
from fsmatrix.results.store.document import Direction, Result, comparison_group, hardware_class


@dataclass(frozen=True)
class Point:
    """One stored run of a cell: its value of the series' metric, and the typed result (for what
    changed between two points)."""

    time: str
    run_id: str
    repeat: int
    value: float
    host: str | None
    result: Result


@dataclass(frozen=True)
class Series:
    cell_id: str
    metric: str
    direction: Direction
    hardware_class: str
    group: str  # the comparison group's key (matrix.comparison_group)
    group_label: str
    points: tuple[Point, ...]

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]


def load_series(
    store: Store, *, since: str | None = None, only: Sequence[str] = (), metric: str | None = None
) -> list[Series]:
    """The store's series, cells matching ``only`` (globs, or comma lists of them; all without), the key
    metrics or only ``metric``. UserError (exit 2) for a metric that no stored result of those cells has."""
    patterns = [p for text in only for p in text.split(",") if p]
    documents, metric_rows = store.history_rows(since)
    results: dict[str, Result] = {}
    for result_id, doc in documents:
        cell_id = doc.get("cell_id")
        if patterns and not (isinstance(cell_id, str) and any(fnmatch.fnmatchcase(cell_id, p) for p in patterns)):
            continue
        try:
            results[result_id] = Result.read(doc)
        except ValueError:  # the store checked it when it was pushed; an older fsmatrix's may not read
            continue
    known = sorted({name for result_id, name, _, _ in metric_rows if result_id in results})
    if metric is not None and metric not in known:
        raise UserError(
            f"--metric {metric!r}: no stored result{' of ' + ', '.join(patterns) if patterns else ''} has it as a key "
            f"metric; known: {', '.join(known) or 'none (the store holds no passed result)'}"
        )
    classes = {result_id: hardware_class(result) for result_id, result in results.items()}
    points: dict[tuple[str, str, str], list[Point]] = {}
    directions: dict[tuple[str, str, str], Direction] = {}
    for result_id, name, direction, value in metric_rows:
        result = results.get(result_id)
        if result is None or (metric is not None and name != metric):
            continue
        key = (result.cell_id, classes[result_id], name)
        directions[key] = "higher" if direction == "higher" else "lower"
        time = result.started_at or ""
        points.setdefault(key, []).append(
            Point(time, result.run_id, result.repeat, value, result.provenance.host.machine_id, result)
        )
    out = []
    for key in sorted(points):
        cell_id, klass, name = key
        # by start time (stores hold times of several offsets), then run id and repeat: the same order every time
        ordered = tuple(sorted(points[key], key=lambda p: (_instant(p.time), p.run_id, p.repeat)))
        first = ordered[0].result
        group, label = comparison_group(first.params, first.workload)
        out.append(Series(cell_id, name, directions[key], klass, group, label, ordered))
    return out


def _instant(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return when if when.tzinfo else when.replace(tzinfo=UTC)
