"""A side of a comparison (BASE or HEAD): a results directory, or a run id in a results root's index."""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from fsmatrix.errors import UserError
from fsmatrix.results.store.document import Result
from fsmatrix.results.store.files import load_document, load_results


@dataclass
class Side:
    label: str
    docs: list[Result]

    def by_cell(self) -> dict[str, list[Result]]:
        cells: dict[str, list[Result]] = defaultdict(list)
        for doc in self.docs:
            cells[doc.cell_id].append(doc)
        return dict(cells)


def load_side(spec: str, results_root: Path) -> Side:
    """A directory of results, or a run id in ``results_root``'s index."""
    path = Path(spec)
    if path.exists():
        if not path.is_dir():
            raise UserError(f"{spec}: not a directory of results")
        return Side(spec, load_results(path))
    index = results_root / "index.sqlite"
    if index.is_file():
        db = sqlite3.connect(index)
        try:
            paths = [Path(row[0]) for row in db.execute("SELECT path FROM runs WHERE run_id = ?", (spec,))]
        except sqlite3.DatabaseError as exc:
            raise UserError(f"{index}: not a readable fsmatrix index ({exc})") from exc
        finally:
            db.close()
        if paths:
            return Side(spec, [load_document(p) for p in paths])
    raise UserError(f"{spec}: no such results directory, and no run with that id in {index}")
