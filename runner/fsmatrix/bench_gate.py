"""How well does the regression gate work on this machine? ``python -m fsmatrix.bench_gate``

Real runs on the host backend (as root): one 3n+1 cell on ext4 (loop device, direct I/O). Each
round runs the cell in batches of N repeats: two clean batches (an A/A pair), batches with a CPU
hog that spins for a set share of every 10 ms on one CPU while the workers run, and, with
``--variant gtm.global_buffers=1000``, batches of a cell variant with a slower setting, compared as
if they were the base cell. The gate (``compare --fail-on-regression THRESHOLD``) is applied to A
vs B (any call is a false positive) and to A vs each injected batch (a call is a detection).
Prints, as Markdown, the false-positive rate, the detection rate per injection and metric, and
the change in elapsed time each injection caused.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from fsmatrix import matrix, runs
from fsmatrix.agent import provenance
from fsmatrix.backends.host import HostBackend
from fsmatrix.results import compare

CELL = {
    "name": "gate",
    "axes": {"filesystem": ["ext4"]},
    "defaults": {
        "workload": {"threen1": {"start": 1, "end": 200000, "workers": 4, "block": 5000}},
        "storage.disk_size": "2G",
    },
}
SHOWN = ("elapsed_s", "worker_cpu_s", "cpu_busy_s", "device_write_bytes_per_op", "device_ios_per_op")
HOG_CODE = """
import os, sys, time
duty = float(sys.argv[1])
os.sched_setaffinity(0, {0})
while True:
    start = time.perf_counter()
    while time.perf_counter() - start < 0.01 * duty:
        pass
    time.sleep(0.01 * (1 - duty))
"""


@contextlib.contextmanager
def cpu_hog(duty: float) -> Iterator[None]:
    """A process that keeps CPU 0 busy ``duty`` of the time (0 = no hog)."""
    if duty <= 0:
        yield
        return
    hog = subprocess.Popen([sys.executable, "-c", HOG_CODE, str(duty)])
    try:
        time.sleep(0.2)
        yield
    finally:
        hog.kill()
        hog.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=5, help="runs a side (N)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threshold", default="5%")
    parser.add_argument("--hogs", default="0.3,1.0", help="CPU hog duty cycles to inject (comma list)")
    parser.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE", help="a slower cell setting")
    parser.add_argument("--end", type=int, default=200_000, help="3n+1 range 1..END")
    parser.add_argument("--results", type=Path, default=Path("results/bench-gate"))
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_gate needs root (loop devices, mkfs, mount)", file=sys.stderr)
        return 2
    threshold = compare.parse_threshold(args.threshold)
    hogs = [float(h) for h in args.hogs.split(",") if h.strip()]
    cell = _with(CELL, f"workload.threen1.end={args.end}")
    m = matrix.expand_document(cell, "gate")
    cell_id = m.cells[0].id
    variants = {v: matrix.expand_document(_with(cell, v), "gate") for v in args.variant}
    console = Console(stderr=True)
    backend = HostBackend()
    started = time.monotonic()

    def batch(run_id: str, duty: float = 0.0, variant: matrix.Matrix | None = None) -> compare.Side:
        which = variant or m
        with cpu_hog(duty):
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

    injections = [f"CPU hog {h:.0%} of one CPU" for h in hogs] + [f"cell variant {v}" for v in variants]
    aa_calls: list[set[str]] = []
    detections: dict[str, list[set[str]]] = {name: [] for name in injections}
    slowdowns: dict[str, list[float]] = {name: [] for name in injections}
    for r in range(1, args.rounds + 1):
        a = batch(f"gate-r{r}-a")
        b = batch(f"gate-r{r}-b")
        aa_calls.append({row.metric for row in compare.compare(a, b, threshold=threshold).regressions})
        heads = [batch(f"gate-r{r}-hog{h:g}", h) for h in hogs]
        heads += [batch(f"gate-r{r}-variant{i}", variant=vm) for i, vm in enumerate(variants.values())]
        for name, head in zip(injections, heads, strict=True):
            res = compare.compare(a, head, threshold=threshold)
            detections[name].append({row.metric for row in res.regressions})
            elapsed = next(row for row in res.rows if row.metric == "elapsed_s")
            slowdowns[name].append(elapsed.comparison.ratio - 1)
        flagged = "; ".join(f"{name}: {sorted(detections[name][-1]) or 'nothing'}" for name in injections)
        console.print(f"round {r}: A/A flagged {sorted(aa_calls[-1]) or 'nothing'}; {flagged}", markup=False)
    minutes = (time.monotonic() - started) / 60
    print(_table(args, threshold, aa_calls, detections, slowdowns, minutes))
    return 0


def _with(doc: dict[str, Any], setting: str) -> dict[str, Any]:
    """The matrix document with one more default (``key=value``, the value read as YAML)."""
    key, _, value = setting.partition("=")
    return {**doc, "defaults": {**doc["defaults"], key.strip(): yaml.safe_load(value)}}


def _rate(calls: list[set[str]], metric: str | None = None) -> str:
    hits = sum(1 for c in calls if (metric in c if metric else bool(c)))
    return f"{hits}/{len(calls)} ({hits / len(calls):.0%})"


def _table(
    args: Any,
    threshold: float,
    aa_calls: list[set[str]],
    detections: dict[str, list[set[str]]],
    slowdowns: dict[str, list[float]],
    minutes: float,
) -> str:
    prov = provenance.collect()
    lines = [
        f"Gate benchmark: 3n+1 1..{args.end:,} on ext4 (loop, direct I/O), {args.repeats} runs a side, "
        f"{args.rounds} rounds, --fail-on-regression {threshold:.0%}; {datetime.now(UTC):%Y-%m-%d}, "
        f"{prov['cpu_model']} × {prov['cpu_count']}, kernel {platform.release()}, git {prov['git']['sha'][:10]}, "
        f"load average {os.getloadavg()[2]:.1f} (15 min), {minutes:.1f} min",
        "",
        "| comparison | elapsed_s change, median (min..max) | gate failed | "
        + " | ".join(f"{metric} flagged" for metric in SHOWN)
        + " |",
        "|---|---|---|" + "---|" * len(SHOWN),
        f"| A/A (nothing changed) | - | {_rate(aa_calls)} | "
        + " | ".join(_rate(aa_calls, metric) for metric in SHOWN)
        + " |",
    ]
    for name, calls in detections.items():
        s = slowdowns[name]
        lines.append(
            f"| {name} | {statistics.median(s):+.0%} ({min(s):+.0%}..{max(s):+.0%}) | {_rate(calls)} | "
            + " | ".join(_rate(calls, metric) for metric in SHOWN)
            + " |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
