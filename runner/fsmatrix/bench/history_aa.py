"""False alarms of ``fsmatrix history`` on histories where nothing changed (A/A), from real runs.

``python -m fsmatrix.bench.history_aa [--histories H] [--sittings S] [--runs N] [--workdir DIR]
[--format md|json]``: H histories of one cell — the 3n+1 cell of ``matrix/bench/race-far.yaml``
(1..200,000, 4 workers, ext4, 35,000 global buffers) on the host backend, root — each made of S
sittings of N runs (separate ``fsmatrix run`` processes, the histories' sittings interleaved:
history 1's first, history 2's first, ..., so each history spans the whole measurement), the same
build throughout. Each history is pushed to a SQLite store of its own and ``fsmatrix history`` (its
default threshold) reads its elapsed-time series back. Every change point found is a false alarm;
one that names a changed field would be a false attribution (none may). Prints, per history, the
points and change points (attributed or not), and over all of them the rate of change points per
history with its exact 95 % interval (Clopper-Pearson on "a history with at least one"), the date,
the commit and the load average before and after. Defaults: 3 × 3 × 10 (90 runs, about 8 minutes on
a quiet 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fsmatrix.bench import results as bench_results
from fsmatrix.errors import UserError, interrupt_on_sigterm
from fsmatrix.results.verdict import stats

# race-far.yaml's 35,000-buffer cell alone (as tests/results/test_history_runs.py runs it)
MATRIX = (
    "name: history-aa\naxes:\n  filesystem: [ext4]\ndefaults:\n"
    "  workload.threen1: {start: 1, end: 200000, workers: 4, block: 5000}\n  storage.disk_size: 2G\n"
)


def _fsmatrix(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fsmatrix", *args], capture_output=True, text=True, check=False, env=dict(os.environ)
    )
    if done.returncode != 0:
        raise UserError(f"fsmatrix {args[0]} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def measure(histories: int, sittings: int, runs: int, workdir: Path) -> dict[str, Any]:
    meta = {"date": datetime.now(UTC).isoformat(timespec="minutes"), "commit": bench_results.this_commit()}
    meta["load_before"] = bench_results.load_average()
    with tempfile.TemporaryDirectory(prefix="fsmatrix-bench-aa-") as tmp:
        plan = Path(tmp) / "aa.yaml"
        plan.write_text(MATRIX)
        results = Path(tmp) / "results"
        for s in range(1, sittings + 1):
            for h in range(1, histories + 1):
                _fsmatrix("run", str(plan), "--run-id", f"h{h}s{s}", "--repeat", str(runs), "--results",
                          str(results), "--workdir", str(workdir), "--backend", "host")  # fmt: skip
        rows = []
        for h in range(1, histories + 1):
            url = f"sqlite:///{tmp}/h{h}.sqlite"
            _fsmatrix("results", "push", *(str(results / f"h{h}s{s}") for s in range(1, sittings + 1)), "--store", url)
            doc = json.loads(_fsmatrix("history", "--store", url, "--format", "json"))
            (series,) = [s for s in doc["series"] if s["metric"] == "elapsed_s"]
            cps = series["change_points"]
            values = [p["value"] for p in series["points"]]
            rows.append({
                "history": h,
                "points": len(values),
                "median_s": stats.median(values),
                "min_s": min(values),
                "max_s": max(values),
                "change_points": len(cps),
                "attributed": sum(1 for c in cps if c["changed"]),
                "found": [{"index": c["index"], "ratio": c["ratio"], "p": c["p"]} for c in cps],
            })  # fmt: skip
    meta["load_after"] = bench_results.load_average()
    alarmed = sum(1 for r in rows if r["change_points"])
    low, high = stats.clopper_pearson(alarmed, len(rows))
    return {
        **meta,
        "histories": rows,
        "with_a_change_point": alarmed,
        "interval": [low, high],
        "change_points_per_history": sum(r["change_points"] for r in rows) / len(rows),
    }


def markdown(measured: dict[str, Any]) -> str:
    lines = [
        f"{measured['date']}, commit {measured['commit']}, "
        f"load {measured['load_before']} before, {measured['load_after']} after",
        "",
        "| history | points | elapsed s: median (min..max) | change points (attributed) | where: index ×ratio p |",
        "|---|---|---|---|---|",
    ]
    for r in measured["histories"]:
        where = "; ".join(f"{c['index']} ×{c['ratio']:.3f} p {c['p']:.2g}" for c in r["found"]) or "-"
        lines.append(
            f"| {r['history']} | {r['points']} | {r['median_s']:.2f} ({r['min_s']:.2f}..{r['max_s']:.2f}) | "
            f"{r['change_points']} ({r['attributed']}) | {where} |"
        )
    low, high = measured["interval"]
    lines += [
        "",
        f"histories with a change point: {measured['with_a_change_point']} of {len(measured['histories'])} "
        f"(95 % CI {100 * low:.0f}–{100 * high:.0f} %); change points per history: "
        f"{measured['change_points_per_history']:.2f}",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m fsmatrix.bench.history_aa", description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=3)
    parser.add_argument("--sittings", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10, help="runs per sitting")
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp/fsmatrix-bench-aa"))
    parser.add_argument("--format", choices=("md", "json"), default="md")
    args = parser.parse_args(argv)
    try:
        if min(args.histories, args.sittings, args.runs) < 1:
            raise UserError("--histories, --sittings and --runs must be at least 1")
        if os.geteuid() != 0:
            raise UserError("the host backend formats loop devices: run as root")
        doc = measure(args.histories, args.sittings, args.runs, args.workdir)
        print(json.dumps(doc, indent=1) if args.format == "json" else markdown(doc), end="")
    except UserError as exc:
        print(f"fsmatrix.bench.history_aa: error: {exc}", file=sys.stderr)
        return exc.exit_status
    return 0


if __name__ == "__main__":
    sys.exit(main())
