"""The passed runs a results root holds for this host, as much as the ETA and ``timeout: auto`` need
(``estimate.py`` computes from them). Read from the root's store (``root_store.py``) by its columns, newest
first, a bounded number; of those runs only, their cells' parameters from their documents."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.errors import UserError
from fsmatrix.results.store.root_store import LEGACY_INDEX, open_root
from fsmatrix.results.store.url import ROOT_STORE


@dataclass(frozen=True)
class StoredRun:
    """One passed run of this host, as much as the estimates need."""

    cell_id: str
    filesystem: str
    sibling_key: str  # the workload and its parameters, without the filesystem settings
    duration_s: float
    run_id: str = ""


# Estimates are advice: read a bounded number of documents, newest first, so that `run` starts in
# well under a second however many runs a results root holds.
RECENT_PER_CELL = 30  # of a cell's own passed runs here


RECENT_SIBLINGS = 300  # of the other cells' (the fallback "from ext4")


def stored_runs(
    root: Path,
    machine_id: str | None,
    workloads: Iterable[str] | None = None,
    cell_ids: Iterable[str] | None = None,
) -> list[StoredRun]:
    """The passed runs stored under ``root`` that ran on ``machine_id`` (every run when it is None: this
    host cannot be told). Only ``workloads`` when given. With ``cell_ids``, the newest RECENT_PER_CELL of
    each of those cells and the newest RECENT_SIBLINGS of the others (the siblings the fallback looks
    at). Nothing when the root has no store (nor an old index) or it cannot be read: estimates are
    advice, never a reason to stop."""
    if not any((root / name).is_file() for name in (ROOT_STORE, LEGACY_INDEX)):
        return []
    clauses, params = ["status = 'passed'", "duration_s > 0"], []
    if machine_id is not None:
        clauses.append("host = ?")
        params.append(machine_id)
    if workloads is not None:
        wanted = sorted(set(workloads))
        clauses.append(f"workload IN ({','.join('?' * len(wanted))})")
        params += wanted
    # Newest first: a root's store is SQLite, its rowid the order its documents were added in.
    query = f"SELECT id, run_id, cell_id, duration_s FROM results WHERE {' AND '.join(clauses)} "
    query += "ORDER BY pushed_at DESC, rowid DESC"
    try:
        with open_root(root) as store:
            chosen = _newest(store.select(query, params), cell_ids)
            parameters = store.parameters([str(r[0]) for r in chosen])
    except (UserError, sqlite3.Error):
        return []
    found = []
    for rid, run_id, cell_id, duration_s in chosen:
        cell = parameters.get(str(rid))
        if not isinstance(cell, Mapping) or not math.isfinite(float(duration_s)):
            continue
        found.append(
            StoredRun(str(cell_id), str(cell.get("filesystem")), sibling_key(cell), float(duration_s), str(run_id))
        )
    return found


def _newest(rows: Sequence[tuple[Any, ...]], cell_ids: Iterable[str] | None) -> list[tuple[Any, ...]]:
    """Of (id, run id, cell id, duration) rows, newest first: with ``cell_ids``, the first RECENT_PER_CELL
    of each of those cells and the first RECENT_SIBLINGS of the others."""
    if cell_ids is None:
        return list(rows)
    mine = set(cell_ids)
    own: dict[str, int] = {}
    siblings = 0
    out = []
    for row in rows:
        cell_id = str(row[2])
        if cell_id in mine:
            if own.get(cell_id, 0) >= RECENT_PER_CELL:
                continue
            own[cell_id] = own.get(cell_id, 0) + 1
        else:
            if siblings >= RECENT_SIBLINGS:
                continue
            siblings += 1
        out.append(row)
    return out


# Settings that belong to the filesystem rather than the workload: a run that differs only in them
# is "the same workload and parameters on another filesystem".
FILESYSTEM_SETTINGS = ("filesystem", "mkfs_options", "mount_options", "timeout")


def sibling_key(params: Mapping[str, Any]) -> str:
    """The canonical JSON of a cell's settings without the filesystem's own."""
    rest = {k: v for k, v in params.items() if k not in FILESYSTEM_SETTINGS}
    return json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
