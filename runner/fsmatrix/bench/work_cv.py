"""How much each metric varies between repeats of the same cell: time against the work per operation.
``python -m fsmatrix.bench.work_cv RUN_DIR [--format md|json]``

For every cell of a stored run with at least 3 passed runs: per metric — the workload's primary metric,
``cpu_busy_s`` and each of the agent's ``WORK_METRICS`` the runs measured — the runs, the median, the
range and the coefficient of variation (sample standard deviation over mean). A metric the runs did not
measure (null, with its reason in ``metrics_unavailable``) is listed as not available, with the reason,
never as 0. The lower a metric's CV against time's, the fewer runs it needs to separate two
configurations (issue 45; docs/measurements.md, "Work per operation").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import workloads
from fsmatrix.agent.work import WORK_METRICS
from fsmatrix.errors import UserError, exit_with
from fsmatrix.results import store
from fsmatrix.results.verdict.metrics import metric_values

MIN_RUNS = 3


@dataclass(frozen=True)
class Spread:
    cell: str
    metric: str
    runs: int
    median: float | None
    low: float | None
    high: float | None
    cv: float | None  # sd / mean; None: fewer than MIN_RUNS values, or a mean of 0
    unavailable: str | None  # why the runs did not measure it


def _unavailable(docs: list[store.Result], metric: str) -> str | None:
    for d in docs:
        reasons = d.document.get("metrics_unavailable") or {}
        if metric in reasons:
            return str(reasons[metric])
    return None


def spreads(run_dir: Path) -> list[Spread]:
    """Every cell's metrics' spread over its passed runs (see the module's docstring)."""
    by_cell: dict[str, list[store.Result]] = {}
    for doc in store.load_results(run_dir):
        if doc.status == "passed":
            by_cell.setdefault(doc.cell_id, []).append(doc)
    out = []
    for cell, docs in sorted(by_cell.items()):
        if len(docs) < MIN_RUNS:
            continue
        kind = docs[0].workload
        primary = workloads.get(kind).primary_metric.name if kind in workloads.WORKLOADS else None
        for metric in [m for m in (primary, "cpu_busy_s") if m] + [m.name for m in WORK_METRICS]:
            values = metric_values(docs, metric)
            if len(values) < MIN_RUNS:
                out.append(Spread(cell, metric, len(values), None, None, None, None, _unavailable(docs, metric)))
                continue
            mean = statistics.fmean(values)
            cv = statistics.stdev(values) / mean if mean else None
            out.append(Spread(cell, metric, len(values), statistics.median(values), min(values), max(values), cv, None))
    return out


def _number(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def markdown(found: list[Spread]) -> str:
    lines = ["| cell | metric | runs | median (min..max) | CV |", "|---|---|---|---|---|"]
    for s in found:
        if s.unavailable is not None or s.median is None:
            why = s.unavailable or f"{s.runs} runs measured it"
            lines.append(f"| {s.cell} | {s.metric} | {s.runs} | not available: {why} | - |")
            continue
        cv = "-" if s.cv is None else f"{100 * s.cv:.2f} %"
        lines.append(
            f"| {s.cell} | {s.metric} | {s.runs} | {_number(s.median)} ({_number(s.low)}..{_number(s.high)}) | {cv} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsmatrix.bench.work_cv", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--format", choices=("md", "json"), default="md")
    args = parser.parse_args(argv)
    try:
        found = spreads(args.run_dir)
    except UserError as exc:
        print(f"fsmatrix.bench.work_cv: error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        doc: dict[str, Any] = {"run_dir": str(args.run_dir), "spreads": [asdict(s) for s in found]}
        print(json.dumps(doc, indent=1))
    else:
        print(markdown(found), end="")
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.work_cv")
