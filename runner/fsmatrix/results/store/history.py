"""A store's results as series over time (``fsmatrix history``): per cell × hardware class × metric
(each key metric, and each work metric: the work per operation, schema.py), one point per stored passed
run that measured it, oldest first. The decisions on them (change points, what
changed) are the verdicts' (``verdict/history.py``); this module only reads.

It reads the store's columns, not its documents: the cell, the start time, the hardware class, the
comparison group and the metrics are columns (``schema.py``), and what ``Selection`` asks for is
SQL's ``WHERE``. A document is read only for what no column holds, what changed at a change point,
and only the two documents either side of each change point (``documents``).

A series never mixes hardware classes: a cell on two kinds of machine is two series, as in a report.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fsmatrix.errors import UserError
from fsmatrix.results.store import schema
from fsmatrix.results.store.database import Store
from fsmatrix.results.store.document import Direction, Result

CELLS_PER_QUERY = 500  # cell ids in one ``IN (...)``: far under SQLite's and PostgreSQL's limits on parameters


@dataclass(frozen=True)
class Selection:
    """What history reads: passed results of the cells matching ``only`` (globs, or comma lists of them;
    every cell without), started at or after ``since`` (ISO 8601), and, each when given, of the key
    or work metric ``metric``, the hardware class ``hardware_class`` and the comparison group ``group`` (its
    label as history prints it, or its key)."""

    only: Sequence[str] = ()
    since: str | None = None
    metric: str | None = None
    hardware_class: str | None = None
    group: str | None = None

    @property
    def patterns(self) -> list[str]:
        return [p for text in self.only for p in text.split(",") if p]


@dataclass(frozen=True)
class Point:
    """One stored run of a cell: its value of the series' metric, and the id of its stored document
    (read for what changed at a change point, never for the point itself)."""

    time: str
    run_id: str
    repeat: int
    value: float
    host: str | None
    result_id: str


@dataclass(frozen=True)
class Series:
    cell_id: str
    metric: str
    direction: Direction
    hardware_class: str
    group: str  # the comparison group's key (store.comparison_group)
    group_label: str
    points: tuple[Point, ...]
    kind: str = schema.KEY  # a key metric, or the work per operation (schema.WORK)

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]


COLUMNS = (
    "r.cell_id, r.hardware_class, m.metric, m.direction, m.value, r.started_at, r.run_id, r.repeat, r.host, "
    "r.id, r.comparison_group, r.comparison_label, m.kind"
)
FROM = "FROM result_metrics m JOIN results r ON r.id = m.result_id"
# A selected row's columns by position (COLUMNS' order): rows stay the database's tuples until they are
# points (a row object each would cost a second in 750,000).
CELL, CLASS, METRIC, DIRECTION, VALUE, STARTED, RUN, REPEAT, HOST, ID, GROUP, LABEL, KIND = range(13)


def load_series(store: Store, selection: Selection | None = None) -> list[Series]:
    """The store's series under ``selection`` (every passed result without), in the order of their
    (cell, hardware class, metric). UserError (exit 2) for a metric, hardware class or comparison
    group that no stored result of the selected cells has."""
    selection = selection or Selection()
    chunks = _cell_chunks(store, selection)
    rows = [r for cells in chunks for r in store.select(*_query(COLUMNS, selection, cells))]
    if not rows:
        _check_known(store, selection, chunks)
    return _series(rows)


def documents(store: Store, ids: Collection[str]) -> dict[str, Result]:
    """The stored documents of these points (``Point.result_id``), typed: what changed at a change
    point is read from them, and from no other point's."""
    return store.results(ids)


def _where(selection: Selection, cells: Sequence[str] | None, *, narrowed: bool = True) -> tuple[str, list[Any]]:
    """The ``WHERE`` of a selection: passed results started at or after ``since``, of ``cells`` (None:
    of every cell); ``narrowed``: of its metric, hardware class and group too."""
    clauses, params = ["r.status = 'passed'"], []
    if selection.since is not None:
        # The stored text against ISO 8601 UTC, as before the columns were read (times of other offsets
        # compare by their text; the points are ordered by their instants, _series)
        clauses.append("r.started_at >= ?")
        params.append(selection.since)
    if cells is not None:
        clauses.append(f"r.cell_id IN ({','.join('?' * len(cells))})")
        params += cells
    if narrowed:
        for clause, value in (
            ("m.metric = ?", selection.metric),
            ("r.hardware_class = ?", selection.hardware_class),
            ("(r.comparison_label = ? OR r.comparison_group = ?)", selection.group),
        ):
            if value is not None:
                clauses.append(clause)
                params += [value] * clause.count("?")
    return " AND ".join(clauses), params


def _query(
    columns: str, selection: Selection, cells: Sequence[str] | None, *, narrowed: bool = True
) -> tuple[str, list[Any]]:
    where, params = _where(selection, cells, narrowed=narrowed)
    return f"SELECT {columns} {FROM} WHERE {where}", params


def _cell_chunks(store: Store, selection: Selection) -> list[list[str] | None]:
    """The cells to select, ``CELLS_PER_QUERY`` a query: ``[None]`` (every cell, one query) without
    ``only``. Its globs are fnmatch's, as everywhere else in fsmatrix, which neither SQLite's GLOB nor
    PostgreSQL has exactly: matched here against the stored cell ids (few next to the results), which
    then select in SQL."""
    patterns = selection.patterns
    if not patterns:
        return [None]
    where, params = _where(selection, None, narrowed=False)
    stored = [str(r[0]) for r in store.select(f"SELECT DISTINCT r.cell_id FROM results r WHERE {where}", params)]
    cells = sorted(c for c in stored if any(fnmatch.fnmatchcase(c, p) for p in patterns))
    return [cells[i : i + CELLS_PER_QUERY] for i in range(0, len(cells), CELLS_PER_QUERY)]


def _check_known(store: Store, selection: Selection, chunks: Sequence[Sequence[str] | None]) -> None:
    """Nothing selected: a metric, hardware class or group that no result of the selected cells has is
    bad input (one line, with the ones there are); anything else is an empty history."""
    patterns = selection.patterns
    of = " of " + ", ".join(patterns) if patterns else ""
    for option, columns, given, has in (
        ("--metric", ("m.metric",), selection.metric, "has it as a key or work metric"),
        ("--hardware-class", ("r.hardware_class",), selection.hardware_class, "is of that hardware class"),
        ("--group", ("r.comparison_label", "r.comparison_group"), selection.group, "is of that comparison group"),
    ):
        if given is None:
            continue
        known = [_known(store, selection, chunks, column) for column in columns]  # shown: the first (labels)
        if any(given in values for values in known):
            continue
        raise UserError(
            f"{option} {given!r}: no stored result{of} {has}; "
            f"known: {', '.join(known[0]) or 'none (the store holds no passed result)'}"
        )


def _known(store: Store, selection: Selection, chunks: Sequence[Sequence[str] | None], column: str) -> list[str]:
    """The values of ``column`` among the selected cells' passed results (whatever their metric, class
    and group), sorted."""
    found = {
        str(r[0])
        for cells in chunks
        for r in store.select(*_query(f"DISTINCT {column}", selection, cells, narrowed=False))
    }
    return sorted(found)


def _series(rows: Sequence[tuple[Any, ...]]) -> list[Series]:
    """The rows as series, each one's points oldest first: by start time (stores hold times of several
    offsets), then run id, repeat and id: the same order every time."""
    by_series: dict[tuple[str, str, str], list[tuple[Any, ...]]] = {}
    for row in rows:
        by_series.setdefault((row[CELL], row[CLASS], row[METRIC]), []).append(row)
    instants = {text: _instant(text or "") for text in {row[STARTED] for row in rows}}
    out = []
    for key in sorted(by_series):
        ordered = sorted(by_series[key], key=lambda r: (instants[r[STARTED]], r[RUN], r[REPEAT], r[ID]))
        first, newest = ordered[0], ordered[-1]
        points = tuple(
            Point(r[STARTED] or "", str(r[RUN]), int(r[REPEAT]), float(r[VALUE]), r[HOST], str(r[ID])) for r in ordered
        )
        direction: Direction = "higher" if newest[DIRECTION] == "higher" else "lower"
        # key where any run declared it key (a work metric a workload made key): its series is one, as its rows
        kind = schema.KEY if any(r[KIND] == schema.KEY for r in ordered) else schema.WORK
        out.append(Series(key[0], key[2], direction, key[1], str(first[GROUP]), str(first[LABEL]), points, kind))
    return out


def _instant(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return when if when.tzinfo else when.replace(tzinfo=UTC)
