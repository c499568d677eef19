"""``fsmatrix history``'s speed: change points over one long series and over many short ones; or, with
``--store-documents``, the whole command over a store of that many documents, against an older commit's.
``python -m fsmatrix.bench.history [--points N] [--series S] [--series-points P] [--repeats R] [--format md|json]``
``python -m fsmatrix.bench.history --store-documents N [--store-cells C] [--against COMMIT] [--repeats R]``

Two workloads, each timed ``--repeats`` times (default 3): one series of ``--points`` (default 10,000)
and ``--series`` (default 1,000) series of ``--series-points`` (default 100) each — seeded values of
a few percent noise with a step of 20 % every fifth of the series. Each is one call of Otava in its own
virtualenv (``results/store/otava.py``: the process, its imports and the detection: what ``fsmatrix
history`` pays), then the verdict's ratios, intervals and attribution of every change point found
(``verdict/history.py``; every point a real host-backend result document).

Prints the median and min..max seconds of each part, the change points found, the date, the commit
and the load average before and after (a figure taken while other jobs ran is not a figure). Targets
(issue 39): < 2 s for the long series, < 30 s for the many. Makes Otava's virtualenv first when it
is missing (``make deps`` does). A bad option is one line (exit status 2).

``--store-documents N`` (issue 46: history on the store's columns) measures ``fsmatrix history`` end to
end and ``load_series`` alone over an SQLite store of N documents in ``--store-cells`` cells (default
100), each side's store made by its own code, this tree's against ``--against COMMIT``'s, alternating,
their outputs compared byte for byte, and the migration of the older side's store timed
(``bench/history_store.py``). 100,000 documents: about 1.1 GB a store under the temporary directory.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fsmatrix.backends import image
from fsmatrix.bench import history_store
from fsmatrix.bench import results as bench_results
from fsmatrix.errors import UserError, exit_with, interrupt_on_sigterm
from fsmatrix.results.store import Result, otava
from fsmatrix.results.store.history import Point, Series
from fsmatrix.results.verdict import history

POINTS = 10_000
SERIES = 1_000
SERIES_POINTS = 100
REPEATS = 3
SEED = 39
TEMPLATE_ID = "template"  # every made point's document: a real host-backend result


def made_series(count: int, length: int, seed: int) -> list[Series]:
    """``count`` series of ``length`` points: noise of 3 %, a 20 % step every fifth of the series (each
    point's document: ``TEMPLATE_ID``)."""
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for s in range(count):
        points = []
        for i in range(length):
            level = 1.2 ** (i * 5 // length)
            when = (start + timedelta(minutes=i)).isoformat()
            points.append(Point(when, f"run-{i}", 1, rng.gauss(level, 0.03 * level), "bench", TEMPLATE_ID))
        out.append(Series(f"cell-{s}", "elapsed_s", "lower", "bench", "group", "group", tuple(points)))
    return out


def measure(series: Sequence[Series], python: Path, repeats: int) -> dict[str, Any]:
    detect_s, decide_s, found = [], [], 0
    template = {TEMPLATE_ID: Result.read(bench_results.made_document(0, bench_results.templates()))}
    for _ in range(repeats):
        t0 = time.perf_counter()
        _, points = otava.detect(python, [s.values for s in series])
        t1 = time.perf_counter()
        decided = [
            history.history(s, [(f.index, f.p) for f in p], template) for s, p in zip(series, points, strict=True)
        ]
        t2 = time.perf_counter()
        detect_s.append(t1 - t0)
        decide_s.append(t2 - t1)
        found = sum(len(h.change_points) for h in decided)
    return {
        "series": len(series),
        "points": sum(len(s.points) for s in series),
        "change_points": found,
        "otava_s": _spread(detect_s),
        "attribution_s": _spread(decide_s),
        "total_s": _spread([a + b for a, b in zip(detect_s, decide_s, strict=True)]),
    }


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def markdown(measured: dict[str, Any]) -> str:
    lines = [
        f"History benchmark, {measured['date']}, commit {measured['commit']}, load {measured['load_before']} before / "
        f"{measured['load_after']} after, {measured['repeats']} repeats",
        "",
        "| workload | points | change points | Otava s | attribution s | total s: median (min..max) |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in measured["workloads"].items():
        total = m["total_s"]
        lines.append(
            f"| {name} | {m['points']:,} | {m['change_points']} | {m['otava_s']['median']:.2f} | "
            f"{m['attribution_s']['median']:.2f} | {total['median']:.2f} ({total['min']:.2f}..{total['max']:.2f}) |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m fsmatrix.bench.history", description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=POINTS)
    parser.add_argument("--series", type=int, default=SERIES)
    parser.add_argument("--series-points", type=int, default=SERIES_POINTS)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--format", choices=("md", "json"), default="md")
    parser.add_argument("--store-documents", type=int, default=0, metavar="N", help="time history over a store")
    parser.add_argument("--store-cells", type=int, default=history_store.CELLS, metavar="C")
    parser.add_argument("--against", default=None, metavar="COMMIT", help="the code before (--store-documents)")
    args = parser.parse_args(argv)
    try:
        if min(args.points, args.series, args.series_points, args.repeats) < 1:
            raise UserError("--points, --series, --series-points and --repeats must be at least 1")
        if args.store_documents < 0 or not 1 <= args.store_cells <= (args.store_documents or args.store_cells):
            raise UserError("--store-documents must be at least 0, --store-cells from 1 to --store-documents")
        if args.against is not None and not args.store_documents:
            raise UserError("--against compares a store's history: give --store-documents too")
        python = otava.ensure(image.cache_root() / otava.VENV_NAME, lambda line: print(line, file=sys.stderr))
        if args.store_documents:
            found = history_store.measure(args.store_documents, args.store_cells, args.repeats, args.against)
            print(json.dumps(found, indent=1) if args.format == "json" else history_store.markdown(found), end="")
            return 0
        long_series = made_series(1, args.points, SEED)
        many = made_series(args.series, args.series_points, SEED + 1)
        measured: dict[str, Any] = {
            "date": datetime.now(UTC).isoformat(timespec="minutes"),
            "commit": bench_results.this_commit(),
            "load_before": bench_results.load_average(),
            "repeats": args.repeats,
        }
        measured["workloads"] = {
            f"1 series of {args.points:,}": measure(long_series, python, args.repeats),
            f"{args.series:,} series of {args.series_points:,}": measure(many, python, args.repeats),
        }
        measured["load_after"] = bench_results.load_average()
        print(
            json.dumps(measured, indent=1) if args.format == "json" else markdown(measured),
            end="\n" if args.format == "json" else "",
        )
    except UserError as exc:
        print(f"fsmatrix.bench.history: error: {exc}", file=sys.stderr)
        return exc.exit_status
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.history")
