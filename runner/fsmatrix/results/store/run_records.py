"""What a report is made from, read in one place: a run directory's (or a whole results root's)
result documents, its typed ``matrix.json`` and, for a run that raced, its ``race.json``. The verdict
takes them as they are (``verdict/report.py``: ``of_run``) and reads no file itself."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fsmatrix.results.store.document import Result
from fsmatrix.results.store.files import load_results
from fsmatrix.results.store.records import Race, RunMatrix, load_race, load_run_matrix


@dataclass(frozen=True)
class RunRecords:
    results: list[Result]
    matrix: RunMatrix | None  # None: no readable matrix.json; the answer chooses baselines by cell id
    race: Race | None  # the run's race when it raced


def load_run_records(directory: Path) -> RunRecords:
    """The records under ``directory`` (a run directory or a results root; UserError when it holds no
    result document), with its matrix.json(s) and, for a run directory that raced, its race."""
    results = load_results(directory)
    race = load_race(directory) if directory.is_dir() else None
    return RunRecords(results, load_run_matrix(directory), race)
