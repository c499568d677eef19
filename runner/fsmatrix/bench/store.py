"""The store's speed: pushing result documents, and listing one cell's runs among many.
``python -m fsmatrix.bench.store [--documents N] [--lookups L] [--postgresql URL] [--format md|json]``

For SQLite (a temporary file) and PostgreSQL (a throwaway cluster, ``throwaway_pg.py``, unless
``--postgresql URL`` names an empty database to use): ``--documents`` (default 100,000) result
documents made from the real host-backend runs stored under tests/data/goldens/ (``bench.results``'
templates: each a real document under a new run id, cell id and repeat, ``samples.series``
included), typed once and pushed with ``Store.push`` in its batches; then ``Store.cell_runs`` of
``--lookups`` (default 20) cells drawn at random (seeded), each timed.

Prints, per store: the push rate (documents/s over the whole push, and the slowest and fastest
tenth of it), and a lookup's median and min..max milliseconds; with the date, the commit and the
load average before and after (a figure taken while other jobs ran is not a figure). Targets (issue
38): push ≥ 500 documents/s, a lookup < 100 ms among 100,000 documents. Needs root for the
throwaway cluster (it runs as the ``postgres`` user); the temporary files and the server go on every
way out. A bad option is one line (exit status 2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fsmatrix.bench import results as bench_results
from fsmatrix.bench import throwaway_pg
from fsmatrix.errors import UserError, exit_with, interrupt_on_sigterm
from fsmatrix.results.store import Result, database
from fsmatrix.results.store import url as store_urls

DOCUMENTS = 100_000
LOOKUPS = 20
CELLS_PER_RUN = 100
SEED = 38


def documents(count: int) -> list[Result]:
    """``count`` typed documents, each a real one under a new run id, cell id and repeat."""
    made_from = bench_results.templates()
    return [Result.read(bench_results.made_document(i, made_from, CELLS_PER_RUN)) for i in range(count)]


@dataclass
class Figures:
    store: str
    documents: int
    push_s: float
    batch_rates: list[float]  # documents/s of each batch
    lookups_ms: list[float]
    rows_per_lookup: float


def measure(url: store_urls.StoreURL, results: Sequence[Result], lookups: int) -> Figures:
    rates = []
    with database.Store.open(url) as store:
        started = time.perf_counter()
        for start in range(0, len(results), database.BATCH):
            chunk = results[start : start + database.BATCH]
            t0 = time.perf_counter()
            store.push(chunk)
            rates.append(len(chunk) / (time.perf_counter() - t0))
        push_s = time.perf_counter() - started
        cells = sorted({r.cell_id for r in results})
        picked = random.Random(SEED).sample(cells, min(lookups, len(cells)))
        times, rows = [], 0
        for cell_id in picked:
            t0 = time.perf_counter()
            rows += len(store.cell_runs(cell_id))
            times.append((time.perf_counter() - t0) * 1000)
    kind = url.scheme
    return Figures(kind, len(results), push_s, rates, times, rows / max(1, len(picked)))


@contextlib.contextmanager
def postgresql(named: str | None) -> Iterator[store_urls.StoreURL]:
    if named is not None:
        yield store_urls.parse(named)
        return
    if not throwaway_pg.available():
        raise UserError("no PostgreSQL 15 here for a throwaway cluster: give --postgresql URL of an empty database")
    with throwaway_pg.cluster("bench") as cluster:
        cluster.create_database("bench")
        yield store_urls.parse(cluster.url("bench"))


def _tenths(rates: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(rates)
    k = max(1, len(ordered) // 10)
    return statistics.mean(ordered[:k]), statistics.mean(ordered[-k:])


def to_json(figures: Sequence[Figures], meta: dict[str, Any]) -> dict[str, Any]:
    out = []
    for f in figures:
        slow, fast = _tenths(f.batch_rates)
        out.append(
            {
                "store": f.store,
                "documents": f.documents,
                "push_s": round(f.push_s, 3),
                "push_rate": round(f.documents / f.push_s, 1),
                "push_rate_slowest_tenth": round(slow, 1),
                "push_rate_fastest_tenth": round(fast, 1),
                "lookup_ms": {
                    "median": round(statistics.median(f.lookups_ms), 3),
                    "min": round(min(f.lookups_ms), 3),
                    "max": round(max(f.lookups_ms), 3),
                    "n": len(f.lookups_ms),
                },
                "rows_per_lookup": f.rows_per_lookup,
            }
        )
    return {**meta, "stores": out}


def markdown(measured: dict[str, Any]) -> str:
    lines = [
        f"Store benchmark, {measured['date']}, commit {measured['commit']}, load {measured['load_before']} before / "
        f"{measured['load_after']} after",
        "",
        "| store | documents | push s | push rate (docs/s) | slowest..fastest tenth | lookup ms: median (min..max, n)"
        " |",
        "|---|---|---|---|---|---|",
    ]
    for s in measured["stores"]:
        lookup = s["lookup_ms"]
        lines.append(
            f"| {s['store']} | {s['documents']:,} | {s['push_s']:.1f} | {s['push_rate']:,.0f} | "
            f"{s['push_rate_slowest_tenth']:,.0f}..{s['push_rate_fastest_tenth']:,.0f} | "
            f"{lookup['median']:.2f} ({lookup['min']:.2f}..{lookup['max']:.2f}, {lookup['n']}) |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m fsmatrix.bench.store", description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=DOCUMENTS)
    parser.add_argument("--lookups", type=int, default=LOOKUPS)
    parser.add_argument("--postgresql", default=None, metavar="URL", help="an empty database to use instead")
    parser.add_argument("--stores", default="sqlite,postgresql", help="which stores (comma list)")
    parser.add_argument("--format", choices=("md", "json"), default="md")
    args = parser.parse_args(argv)
    try:
        if args.documents < 1 or args.lookups < 1:
            raise UserError("--documents and --lookups must be at least 1")
        kinds = [k for k in args.stores.split(",") if k]
        if not kinds or set(kinds) - {"sqlite", "postgresql"}:
            raise UserError(f"--stores {args.stores!r}: a comma list of sqlite and postgresql")
        made = documents(args.documents)
        meta = {
            "date": datetime.now(UTC).isoformat(timespec="minutes"),
            "commit": bench_results.this_commit(),
            "load_before": bench_results.load_average(),
        }
        figures = []
        with tempfile.TemporaryDirectory(prefix="fsmatrix-bench-store-") as tmp:
            if "sqlite" in kinds:
                figures.append(measure(store_urls.parse(f"sqlite:///{tmp}/store.sqlite"), made, args.lookups))
            if "postgresql" in kinds:
                with postgresql(args.postgresql) as url:
                    figures.append(measure(url, made, args.lookups))
        meta["load_after"] = bench_results.load_average()
        doc = to_json(figures, meta)
        print(
            json.dumps(doc, indent=1) if args.format == "json" else markdown(doc),
            end="" if args.format == "md" else "\n",
        )
    except UserError as exc:
        print(f"fsmatrix.bench.store: error: {exc}", file=sys.stderr)
        return exc.exit_status
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.store")
