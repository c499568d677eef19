"""A side of a comparison (BASE or HEAD): a results directory, or a run id of a results root."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from fsmatrix.errors import UserError
from fsmatrix.results.store.document import Result
from fsmatrix.results.store.files import iter_result_files, load_results


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
    """A directory of results, or a run id of ``results_root``: its run folder (``ROOT/RUN_ID``, where
    `fsmatrix run` and `results merge` put a run's documents, and its store's rows point)."""
    path = Path(spec)
    if path.exists():
        if not path.is_dir():
            raise UserError(f"{spec}: not a directory of results")
        return Side(spec, load_results(path))
    run_dir = results_root / spec
    if Path(spec).name == spec and spec not in (".", "..") and any(iter_result_files(run_dir)):
        return Side(spec, load_results(run_dir))
    raise UserError(f"{spec}: no such results directory, and no run with that id in {results_root}")
