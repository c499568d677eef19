"""How right were the estimates? ``python -m fsmatrix.bench.estimates RUN_DIR [--results ROOT]``

RUN_DIR is a directory ``fsmatrix run`` wrote (``matrix.json`` and one ``<cell>/r<N>.json`` per run).
For each of its cells, the estimate ``fsmatrix run`` prints (results/verdict/estimate.py: the median of the
cell's passed runs stored under ROOT on the host RUN_DIR's runs were made on, else the same workload
on another filesystem) is computed again from every stored run *except RUN_DIR's own* — what the
estimate was before that run, when RUN_DIR is the latest run — and set against the median duration
of the cell's passed runs in RUN_DIR. ROOT defaults to RUN_DIR's parent (a results root).

Prints Markdown: a line per cell (estimate, its source, the actual median, the error) and how many
cells finished within ±30 % of their estimate (issue 27: at least 80 % of them on a quiet machine,
after ``make demo``; a cell without an estimate counts as missed). Runs nothing; needs no root.
A directory that is not a run directory, or holds no passed run, stops it with one line (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fsmatrix.errors import UserError, exit_with
from fsmatrix.results import store
from fsmatrix.results.store import past_runs
from fsmatrix.results.verdict import estimate


def load(run_dir: Path, root: Path) -> tuple[list[estimate.Accuracy], str | None]:
    """The cells of ``run_dir`` against their estimates from the other runs under ``root``, and the
    host (machine id) the runs were made on."""
    cells = {e.id: dict(e.params) for e in store.run_matrix(run_dir).cells}
    passed = [d for d in store.load_results(run_dir) if d.status == "passed" and d.cell_id in cells]
    if not passed:
        raise UserError(f"{run_dir}: no passed run to set against an estimate")
    actual: dict[str, list[float]] = {}
    for doc in passed:
        actual.setdefault(doc.cell_id, []).append(float(doc.duration_s or 0))
    host = passed[0].provenance.host.machine_id
    stored = [r for r in past_runs.stored_runs(root, host, None, list(cells)) if r.run_id != run_dir.name]
    found = estimate.estimates(cells.items(), stored)
    return estimate.accuracy(found, actual), host


def markdown(run_dir: Path, rows: list[estimate.Accuracy], margin: float) -> str:
    lines = [
        f"Estimates before {run_dir} against its runs (±{margin:.0%}):",
        "",
        "| cell | estimate (source) | actual: median of its passed runs | error |",
        "|---|---|---|---|",
    ]
    for a in rows:
        e = a.error()
        error = "no estimate" if e is None else f"{e:+.0%}" + ("" if a.within(margin) else " (outside)")
        lines.append(f"| {a.cell_id} | {a.estimate.show()} | {estimate.duration(a.actual_s)} | {error} |")
    hits = sum(a.within(margin) for a in rows)
    lines += ["", f"{hits} of {len(rows)} cells within ±{margin:.0%} of their estimate ({hits / len(rows):.0%})"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a directory `fsmatrix run` wrote")
    parser.add_argument("--results", type=Path, default=None, help="the results root (default: RUN_DIR's parent)")
    parser.add_argument("--margin", type=float, default=estimate.MARGIN, help="within ±this share (0.3: 30 %%)")
    args = parser.parse_args(argv)
    try:
        if not 0 < args.margin < 1:
            raise UserError(f"--margin {args.margin}: must be in (0, 1)")
        rows, _ = load(args.run_dir, args.results or args.run_dir.parent)
    except UserError as exc:
        print(f"bench.estimates: error: {exc}", file=sys.stderr)
        return 2
    print(markdown(args.run_dir, rows, args.margin))
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.estimates")
