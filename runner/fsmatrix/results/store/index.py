"""The SQLite index of a results root (``<root>/index.sqlite``): what ran, where its document is, and
its metrics, for quick queries. Rebuildable from the files (``reindex``)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from fsmatrix.agent import jsonfile
from fsmatrix.results.store.files import iter_result_files


class Index:
    """SQLite index of runs: what ran, where its document is, and its metrics (for quick queries)."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.path = root / "index.sqlite"
        self.db = sqlite3.connect(self.path, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(
            """CREATE TABLE IF NOT EXISTS runs (
                 run_id TEXT NOT NULL, cell_id TEXT NOT NULL, repeat INTEGER NOT NULL,
                 status TEXT NOT NULL, workload TEXT, filesystem TEXT, started_at TEXT,
                 duration_s REAL, git_sha TEXT, kernel TEXT, backend TEXT, path TEXT NOT NULL,
                 metrics TEXT NOT NULL,
                 PRIMARY KEY (run_id, cell_id, repeat))"""
        )

    def add(self, run_id: str, doc: dict[str, Any], path: Path) -> None:
        prov = doc.get("provenance", {})
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id,
                    doc["cell_id"],
                    doc["repeat"],
                    doc["status"],
                    doc.get("workload"),
                    doc.get("params", {}).get("filesystem"),
                    doc.get("started_at"),
                    doc.get("duration_s"),
                    prov.get("git", {}).get("sha"),
                    prov.get("kernel"),
                    prov.get("backend"),
                    str(path),
                    json.dumps(doc.get("metrics", {})),
                ),
            )

    def rows(self, run_id: str | None = None) -> list[sqlite3.Row]:
        self.db.row_factory = sqlite3.Row
        query = "SELECT * FROM runs" + (" WHERE run_id = ?" if run_id else "") + " ORDER BY run_id, cell_id, repeat"
        return list(self.db.execute(query, (run_id,) if run_id else ()))

    def close(self) -> None:
        self.db.close()


def reindex(root: Path) -> int:
    """Rebuild the SQLite index of a results root from its documents; returns how many it holds."""
    (root / "index.sqlite").unlink(missing_ok=True)
    index = Index(root)
    count = 0
    try:
        for path in iter_result_files(root):
            doc = jsonfile.read(path)
            index.add(doc.get("run_id") or path.parent.parent.name, doc, path)
            count += 1
    finally:
        index.close()
    return count
