"""The passed runs a results root holds for this host, as much as the ETA and ``timeout: auto`` need
(``estimate.py`` computes from them). Read through the index, newest first, a bounded number."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import jsonfile
from fsmatrix.results.store.files import result_path


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
    """The passed runs indexed under ``root`` whose documents say they ran on ``machine_id`` (every
    run when it is None: this host cannot be told). Only ``workloads`` when given. With ``cell_ids``,
    the newest RECENT_PER_CELL of each of those cells and the newest RECENT_SIBLINGS of the others
    (the siblings the fallback looks at). Nothing when there is no index or it cannot be read:
    estimates are advice, never a reason to stop."""
    db_path = root / "index.sqlite"
    if not db_path.is_file():
        return []
    query = "SELECT run_id, cell_id, repeat, path, duration_s FROM runs WHERE status = 'passed' AND duration_s > 0"
    wanted = sorted(set(workloads)) if workloads is not None else None
    if wanted is not None:
        query += f" AND workload IN ({','.join('?' * len(wanted))})"
    query += " ORDER BY rowid DESC"  # newest first
    mine = set(cell_ids) if cell_ids is not None else None
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5)
        try:
            rows = list(db.execute(query, wanted or ()))
        finally:
            db.close()
    except sqlite3.Error:
        return []
    found = []
    own: dict[str, int] = {}
    siblings = 0
    for run_id, cell_id, repeat, path, duration_s in rows:
        if mine is not None:
            if cell_id in mine and own.get(cell_id, 0) >= RECENT_PER_CELL:
                continue
            if cell_id not in mine and siblings >= RECENT_SIBLINGS:
                continue
        doc = _document(root, run_id, cell_id, repeat, path)
        if doc is None:
            continue
        host = (doc.get("provenance") or {}).get("host") or {}
        if machine_id is not None and host.get("machine_id") != machine_id:
            continue
        params = doc.get("params")
        if not isinstance(params, dict) or not math.isfinite(float(duration_s)):
            continue
        if mine is not None and cell_id in mine:
            own[cell_id] = own.get(cell_id, 0) + 1
        elif mine is not None:
            siblings += 1
        found.append(
            StoredRun(cell_id, str(params.get("filesystem")), sibling_key(params), float(duration_s), str(run_id))
        )
    return found


def _document(root: Path, run_id: str, cell_id: str, repeat: int, path: str) -> dict[str, Any] | None:
    """A run's document where the results layout puts it under ``root`` (the index's path may be
    relative to wherever that run was started), else where the index says."""
    for candidate in (result_path(root / run_id, cell_id, repeat), Path(path)):
        try:
            doc = jsonfile.read(candidate)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            return doc
    return None


# Settings that belong to the filesystem rather than the workload: a run that differs only in them
# is "the same workload and parameters on another filesystem".
FILESYSTEM_SETTINGS = ("filesystem", "mkfs_options", "mount_options", "timeout")


def sibling_key(params: Mapping[str, Any]) -> str:
    """The canonical JSON of a cell's settings without the filesystem's own."""
    rest = {k: v for k, v in params.items() if k not in FILESYSTEM_SETTINGS}
    return json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
