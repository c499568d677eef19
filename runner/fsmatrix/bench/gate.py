"""How well does the regression gate work on this machine? ``python -m fsmatrix.bench.gate``

Real runs (host backend by default, as root: one 3n+1 cell on ext4 on a loop device with direct
I/O; ``--backend qemu`` runs the same cell in guests). Each round runs three separate batches of N
repeats each: A, B (the same cell again: an A/A pair) and V, a cell variant with a known IO cost
(``--variant``, default ``gtm.global_buffers=1000``), compared as if it were the base cell. Per
round the gate (``compare --fail-on-regression THRESHOLD``: each cell's primary metric, Holm
across cells) is applied to

- A vs B: any failure is a **false alarm**;
- A vs V: a failure is a **detection** of a real IO-cost regression;
- A vs B with B's primary metric made 10 % and 20 % worse (``--slowdowns``): a detection of a
  slowdown of known size on top of real between-batch noise.

Batches are separate runs (fresh mkfs, processes and page cache for every repeat), so the A/A
pairs carry the drift between batches that a real gate faces, not the spread inside one sample.
Prints, as Markdown, every rate with its 95 % Clopper-Pearson interval.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from fsmatrix import matrix, runs
from fsmatrix.agent import provenance
from fsmatrix.backends import BACKENDS
from fsmatrix.errors import UserError
from fsmatrix.results import compare, stats

CELL = {
    "name": "gate",
    "axes": {"filesystem": ["ext4"]},
    "defaults": {
        "workload": {"threen1": {"start": 1, "end": 200000, "workers": 4, "block": 5000}},
        "storage.disk_size": "2G",
    },
}


def scaled(side: compare.Side, slowdown: float) -> compare.Side:
    """``side`` with each metric the gate decides on made ``slowdown`` worse (0.2: 20 % slower), as
    a program doing 20 % more work would be: its time and its CPU-seconds alike."""
    docs = []
    for doc in side.docs:
        metrics = dict(doc.get("metrics") or {})
        for metric in compare.gate_metrics([doc]):
            if metric in metrics:
                better = (doc.get("key_metrics") or {}).get(metric, "lower")
                factor = 1 + slowdown if better == "lower" else 1 / (1 + slowdown)
                metrics[metric] = metrics[metric] * factor
        docs.append({**doc, "metrics": metrics})
    return compare.Side(f"{side.label}+{slowdown:.0%}", docs)


def gate_fails(base: compare.Side, head: compare.Side, threshold: float) -> bool:
    return compare.compare(base, head, threshold=threshold).exit_status() == 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=5, help="runs a side (N)")
    parser.add_argument("--rounds", type=int, default=20, help="A/A pairs (and detections of each kind)")
    parser.add_argument("--threshold", default="5%")
    parser.add_argument("--slowdowns", default="0.1,0.2", help="injected slowdowns of B's primary metric")
    parser.add_argument("--variant", default="gtm.global_buffers=1000", metavar="KEY=VALUE", help="a costlier cell")
    parser.add_argument("--end", type=int, default=200_000, help="3n+1 range 1..END")
    parser.add_argument("--backend", choices=list(BACKENDS), default="host")
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp/fsmatrix"))
    parser.add_argument("--results", type=Path, default=Path("results/bench-gate"))
    parser.add_argument(
        "--analyse", action="store_true", help="run nothing: judge the batches already in --results with today's gate"
    )
    args = parser.parse_args(argv)
    if args.analyse:
        return analyse(args)
    if os.geteuid() != 0:
        print("bench_gate needs root (loop devices, mkfs, mount)", file=sys.stderr)
        return 2
    threshold = compare.parse_threshold(args.threshold)
    slowdowns = [float(x) for x in args.slowdowns.split(",") if x.strip()]
    cell = _with(CELL, f"workload.threen1.end={args.end}")
    m = matrix.expand_document(cell, "gate")
    cell_id = m.cells[0].id
    variant = matrix.expand_document(_with(cell, args.variant), "gate")
    console = Console(stderr=True)
    backend = BACKENDS[args.backend].make(args.workdir, [])
    started = time.monotonic()

    def batch(run_id: str, which: matrix.Matrix) -> compare.Side:
        summary = runs.run_matrix(
            which,
            which.cells,
            backend,
            results_root=args.results,
            run_id=run_id,
            repeat=args.repeats,
            force=True,
            console=console,
        )
        # a variant's documents stand in for the base cell's, as a slower version of that cell would
        return compare.Side(run_id, [{**d, "cell_id": cell_id} for ds in summary.docs.values() for d in ds])

    tally = Tally(args.variant, slowdowns, threshold)
    try:
        for r in range(1, args.rounds + 1):
            tally.add(batch(f"gate-r{r}-a", m), batch(f"gate-r{r}-b", m), batch(f"gate-r{r}-v", variant))
            console.print(f"round {r}: {tally.last()}", markup=False)
    finally:
        backend.close()
    minutes = (time.monotonic() - started) / 60
    print(_table(args, threshold, tally, minutes))
    return 0


class Tally:
    """The gate's verdicts per kind of comparison, round by round."""

    def __init__(self, variant: str, slowdowns: list[float], threshold: float) -> None:
        self.slowdowns, self.threshold = slowdowns, threshold
        self.kinds = ["A/A (nothing changed)", f"cell variant {variant}", *(f"+{s:.0%} on B" for s in slowdowns)]
        self.fails: dict[str, list[bool]] = {k: [] for k in self.kinds}
        self.changes: dict[str, dict[str, list[float]]] = {k: {} for k in self.kinds}

    def add(self, a: compare.Side, b: compare.Side, v: compare.Side) -> None:
        heads = [b, v, *(scaled(b, s) for s in self.slowdowns)]
        for kind, head in zip(self.kinds, heads, strict=True):
            result = compare.compare(a, head, threshold=self.threshold)
            self.fails[kind].append(result.exit_status() == 1)
            for row in result.rows:
                if row.gated:
                    self.changes[kind].setdefault(row.metric, []).append(row.comparison.ratio - 1)

    def last(self) -> str:
        return "; ".join(f"{k}: {'FAIL' if self.fails[k][-1] else 'pass'}" for k in self.kinds)


def analyse(args: Any) -> int:
    """Judge stored batches (gate-r<N>-a/-b/-v under --results) with the gate as it is now."""
    from fsmatrix import results

    threshold = compare.parse_threshold(args.threshold)
    tally = Tally(args.variant, [float(x) for x in args.slowdowns.split(",") if x.strip()], threshold)
    r = 1
    while all((args.results / f"gate-r{r}-{side}").is_dir() for side in "abv"):
        try:
            a, b, v = (results.load_results(args.results / f"gate-r{r}-{side}") for side in "abv")
        except UserError:  # a round still running (or cut short): its batches are not all there
            break
        if min(len(a), len(b), len(v)) >= args.repeats:
            cell_id = a[0]["cell_id"]
            a, b, v = ([{**d, "cell_id": cell_id} for d in docs] for docs in (a, b, v))
            tally.add(compare.Side("a", a), compare.Side("b", b), compare.Side("v", v))
        r += 1
    if not tally.fails[tally.kinds[0]]:
        print(f"no complete round (gate-r1-a, -b, -v) under {args.results}", file=sys.stderr)
        return 2
    print(_table(args, threshold, tally, 0.0))
    return 0


def _with(doc: dict[str, Any], setting: str) -> dict[str, Any]:
    """The matrix document with one more default (``key=value``, the value read as YAML)."""
    key, _, value = setting.partition("=")
    return {**doc, "defaults": {**doc["defaults"], key.strip(): yaml.safe_load(value)}}


def rate(outcomes: list[bool]) -> str:
    """ "3/20 (15 %, 95 % CI 3-38 %)": hits, share and the Clopper-Pearson interval."""
    hits, n = sum(outcomes), len(outcomes)
    if not n:
        return "-"
    low, high = stats.clopper_pearson(hits, n)
    return f"{hits}/{n} ({hits / n:.0%}, 95 % CI {low:.0%}-{high:.0%})"


def _table(args: Any, threshold: float, tally: Tally, minutes: float) -> str:
    prov = provenance.collect()
    lines = [
        f"Gate benchmark: 3n+1 1..{args.end:,} on ext4, backend {args.backend}, {args.repeats} runs a side, "
        f"{len(tally.fails[tally.kinds[0]])} rounds of separate batches, --fail-on-regression {threshold:.0%}; "
        f"{datetime.now(UTC):%Y-%m-%d}, {prov['cpu_model']} × {prov['cpu_count']}, kernel {platform.release()}, "
        f"git {prov['git']['sha'][:10]}, "
        + (
            f"load average {os.getloadavg()[2]:.1f} (15 min), {minutes:.1f} min"
            if minutes
            else f"judged from the batches stored in {args.results}"
        ),
        "",
        "| comparison | gated metrics' change, median (min..max) | gate failed |",
        "|---|---|---|",
    ]
    for kind, outcomes in tally.fails.items():
        spread = "; ".join(
            f"{metric} {statistics.median(c):+.1%} ({min(c):+.1%}..{max(c):+.1%})"
            for metric, c in tally.changes[kind].items()
        )
        lines.append(f"| {kind} | {spread or '-'} | {rate(outcomes)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
