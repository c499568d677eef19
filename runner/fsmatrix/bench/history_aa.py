"""False alarms of ``fsmatrix history`` on histories where nothing changed (A/A), from real runs, on
time and on the work per operation; and a known change in device bytes written per operation found.

``python -m fsmatrix.bench.history_aa [--histories H] [--sittings S] [--runs N] [--end E] [--inject F]
[--workdir DIR] [--format md|json]``: H histories of one cell — the 3n+1 cell of
``matrix/bench/race-far.yaml`` (1..E, E = 200,000 by default, 4 workers, ext4, 35,000 global buffers)
on the host backend, root — each made of S
sittings of N runs (separate ``fsmatrix run`` processes, the histories' sittings interleaved:
history 1's first, history 2's first, ..., so each history spans the whole measurement), the same
build throughout. Each history is pushed to a SQLite store of its own and ``fsmatrix history`` (its
default threshold) reads its series back: elapsed time, and each work metric the runs measured (the
agent's ``WORK_METRICS``, schema version 3 of the store). Every change point found is a false alarm;
one that names a changed field would be a false attribution (none may). Then the known change: the
same history's documents with device bytes written per operation multiplied by F (1.2 by default)
from its middle run on, each such document marked as measured another way
(``provenance.work_measurement``), pushed to a store of their own: the change point on that series
must be within one run of the middle, and attributed to the mark. Prints, per history, the
points and change points (attributed or not), and over all of them the rate of change points per
history with its exact 95 % interval (Clopper-Pearson on "a history with at least one"), the date,
the commit and the load average before and after. Defaults: 3 × 3 × 10 (90 runs, about 8 minutes on
a quiet 2-core machine); ``--histories 1 --sittings 2 --runs 5 --end 50000`` takes a minute or two.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fsmatrix.agent.work import WORK_METRICS
from fsmatrix.bench import results as bench_results
from fsmatrix.errors import UserError, exit_with, interrupt_on_sigterm
from fsmatrix.results.store.files import iter_result_files
from fsmatrix.results.verdict import stats

# race-far.yaml's 35,000-buffer cell alone (as tests/results/test_history_runs.py runs it); END: its range
MATRIX = (
    "name: history-aa\naxes:\n  filesystem: [ext4]\ndefaults:\n"
    "  workload.threen1: {start: 1, end: END, workers: 4, block: 5000}\n  storage.disk_size: 2G\n"
)
WORK = frozenset(m.name for m in WORK_METRICS)
INJECTED = "device_write_bytes_per_op"
MARK = "bench.history_aa: injected"  # the injected documents' provenance.work_measurement


def _fsmatrix(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fsmatrix", *args], capture_output=True, text=True, check=False, env=dict(os.environ)
    )
    if done.returncode != 0:
        raise UserError(f"fsmatrix {args[0]} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def injected(runs: list[Path], factor: float, store: str) -> dict[str, Any]:
    """The documents of ``runs`` (oldest first, as history orders them), device bytes written per
    operation times ``factor`` from the middle one on, marked, pushed to ``store``: where history finds
    the change, and what it names."""
    with tempfile.TemporaryDirectory(prefix="fsmatrix-bench-aa-injected-") as tmp:
        copies = [Path(shutil.copytree(run, Path(tmp) / run.name)) for run in runs]  # the run folders, as run left them
        files = [(json.loads(p.read_text()), p) for run in copies for p in iter_result_files(run)]
        files = [f for f in files if f[0]["status"] == "passed"]  # the points of history's series
        files.sort(key=lambda f: (str(f[0]["started_at"]), str(f[0]["run_id"]), int(f[0]["repeat"])))
        at = len(files) // 2
        for doc, path in files[at:]:
            if isinstance(doc["metrics"].get(INJECTED), int | float):
                doc["metrics"][INJECTED] = doc["metrics"][INJECTED] * factor
                doc["provenance"]["work_measurement"] = MARK
                path.write_text(json.dumps(doc))
        _fsmatrix("results", "push", *map(str, copies), "--store", store)
    doc = json.loads(_fsmatrix("history", "--store", store, "--metric", INJECTED, "--format", "json"))
    cps = [c for s in doc["series"] for c in s["change_points"]]
    nearest = min(cps, key=lambda c: abs(c["index"] - at), default=None)
    return {
        "at": at,
        "factor": factor,
        "found": [{"index": c["index"], "ratio": c["ratio"], "p": c["p"], "changed": c["changed"]} for c in cps],
        "within_one_run": nearest is not None and abs(nearest["index"] - at) <= 1,
        "attributed": nearest is not None and "work measurement" in nearest["changed"],
    }


def _work_rows(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """Each work series of `fsmatrix history`'s JSON ``answer``: its points, distinct values, change
    points (attributed)."""
    return [
        {
            "metric": s["metric"],
            "points": len(s["points"]),
            "distinct": len({p["value"] for p in s["points"]}),
            "change_points": len(s["change_points"]),
            "attributed": sum(1 for c in s["change_points"] if c["changed"]),
        }
        for s in answer["series"]
        if s["metric"] in WORK
    ]


def measure(
    histories: int, sittings: int, runs: int, workdir: Path, *, end: int = 200_000, factor: float = 1.2
) -> dict[str, Any]:
    meta = {"date": datetime.now(UTC).isoformat(timespec="minutes"), "commit": bench_results.this_commit()}
    meta["load_before"] = bench_results.load_average()
    with tempfile.TemporaryDirectory(prefix="fsmatrix-bench-aa-") as tmp:
        plan = Path(tmp) / "aa.yaml"
        plan.write_text(MATRIX.replace("END", str(end)))
        results = Path(tmp) / "results"
        for s in range(1, sittings + 1):
            for h in range(1, histories + 1):
                _fsmatrix("run", str(plan), "--run-id", f"h{h}s{s}", "--repeat", str(runs), "--results",
                          str(results), "--workdir", str(workdir), "--backend", "host")  # fmt: skip
        rows = []
        for h in range(1, histories + 1):
            url = f"sqlite:///{tmp}/h{h}.sqlite"
            sat = [results / f"h{h}s{s}" for s in range(1, sittings + 1)]
            _fsmatrix("results", "push", *map(str, sat), "--store", url)
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
                "work": _work_rows(doc),
                "injected": injected(sat, factor, f"sqlite:///{tmp}/h{h}-injected.sqlite"),
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
        "work_change_points": sum(w["change_points"] for r in rows for w in r["work"]),
        "injected_found": sum(1 for r in rows if r["injected"]["within_one_run"]),
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
        "",
        "| history | work metric | points | distinct values | change points (attributed) |",
        "|---|---|---|---|---|",
    ]
    for r in measured["histories"]:
        for w in r["work"]:
            lines.append(
                f"| {r['history']} | {w['metric']} | {w['points']} | {w['distinct']} | "
                f"{w['change_points']} ({w['attributed']}) |"
            )
    lines += [
        "",
        f"change points on work (A/A): {measured['work_change_points']}",
        "",
        f"| history | {INJECTED} ×factor from run | found at: index ×ratio p, what changed | within one run |",
        "|---|---|---|---|",
    ]
    for r in measured["histories"]:
        inj = r["injected"]
        where = "; ".join(f"{c['index']} ×{c['ratio']:.3f} p {c['p']:.2g} {sorted(c['changed'])}" for c in inj["found"])
        lines.append(
            f"| {r['history']} | ×{inj['factor']} from {inj['at']} | {where or '-'} | "
            f"{'yes' if inj['within_one_run'] else 'no'} |"
        )
    lines += [
        "",
        f"injected changes found within one run: {measured['injected_found']} of {len(measured['histories'])}",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m fsmatrix.bench.history_aa", description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=3)
    parser.add_argument("--sittings", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10, help="runs per sitting")
    parser.add_argument("--end", type=int, default=200_000, help="the 3n+1 range's end (smaller: faster runs)")
    parser.add_argument("--inject", type=float, default=1.2, help="the known change's factor on bytes written/op")
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp/fsmatrix-bench-aa"))
    parser.add_argument("--format", choices=("md", "json"), default="md")
    args = parser.parse_args(argv)
    try:
        if min(args.histories, args.sittings, args.runs) < 1:
            raise UserError("--histories, --sittings and --runs must be at least 1")
        if args.end < 1000 or args.inject <= 0 or args.inject == 1:
            raise UserError(f"--end {args.end}, --inject {args.inject}: --end at least 1000, --inject > 0 and not 1")
        if os.geteuid() != 0:
            raise UserError("the host backend formats loop devices: run as root")
        doc = measure(args.histories, args.sittings, args.runs, args.workdir, end=args.end, factor=args.inject)
        print(json.dumps(doc, indent=1) if args.format == "json" else markdown(doc), end="")
    except UserError as exc:
        print(f"fsmatrix.bench.history_aa: error: {exc}", file=sys.stderr)
        return exc.exit_status
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.history_aa")
