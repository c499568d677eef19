"""The one way a report is assembled: results in, a ``Report`` out: the documents as every part of a
report sees them (an environment axis, such as the guest image, written into their params: derived
once, here), the run's typed ``matrix.json`` and ``race.json``, and the answer built from them. The
CLI (`fsmatrix report`, the report `fsmatrix run` writes), the page, the Slurm collector and the
benchmarks all start here, with what the store read (``store.load_run_records``); the renderers take the
finished ``Report`` and decide nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fsmatrix.results.store import Race, Result, RunMatrix, RunRecords
from fsmatrix.results.verdict import answering, environment
from fsmatrix.results.verdict.answer import DEFAULT_RULE, Answer, Rule


@dataclass(frozen=True)
class Report:
    results: environment.WithAxes  # the environment axes in their params: what the tables and the answer show
    stored: tuple[Result, ...]  # the documents as stored: the exports' rows
    answer: Answer
    matrix: RunMatrix | None
    race: Race | None  # the run's race when it raced


def of_run(records: RunRecords, rule: Rule = DEFAULT_RULE) -> Report:
    """The report on a run directory's (or a results root's) records, as the store read them
    (``store.load_run_records``): its results, its matrix.json(s) and, when it raced, its race."""
    return of_results(records.results, records.matrix, records.race, rule)


def of_results(
    docs: Sequence[Result], matrix: RunMatrix | None = None, race: Race | None = None, rule: Rule = DEFAULT_RULE
) -> Report:
    """The report on these results (tests and benchmarks that hold documents rather than a directory)."""
    seen = environment.with_environment_axes(docs)
    return Report(seen, tuple(docs), answering.build(seen, matrix, race, rule), matrix, race)
