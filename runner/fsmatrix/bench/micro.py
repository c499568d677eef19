"""`make bench`: fsmatrix's own 3n+1 micro benchmark.

Runs matrix/bench.yaml (1..1M on tmpfs and ext4, both key modes, 3 repeats) on the host backend,
then the CPU-only in-memory implementation of the same algorithm 3 times per key mode, and prints
one Markdown table of medians with their min..max.
"""

from __future__ import annotations

import platform
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from fsmatrix import matrix, racing, runs
from fsmatrix.agent import provenance
from fsmatrix.agent.workloads.threen1.memory import run_in_memory
from fsmatrix.backends.host import HostBackend
from fsmatrix.errors import exit_with, interrupt_on_sigterm
from fsmatrix.results import store

REPEATS = 3


def _spread(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}..{max(values):{fmt}})"


def main() -> int:
    interrupt_on_sigterm()  # a timeout's SIGTERM unmounts and detaches as Ctrl-C does
    bench = Path(__file__).resolve().parents[3] / "matrix" / "bench.yaml"
    m = matrix.load(bench)
    console = Console(stderr=True)
    options = runs.RunOptions(Path("results"), "bench", racing.RunPlan.fixed(REPEATS), force=True)
    summary = runs.run_matrix(m, m.cells, HostBackend(), options, console)
    rows = [
        "| where | keys | wall s | worker CPU-s | reads/s | updates/s | database MB | journal MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cell in m.cells:
        docs = [d for d in summary.docs[cell.id] if d.status == "passed"]
        if len(docs) != REPEATS:
            print(f"{cell.id}: only {len(docs)} of {REPEATS} runs passed", file=sys.stderr)
            return 1

        def metric(name: str, docs: list[store.Result] = docs) -> list[float]:
            return [float(d.metrics[name] or 0) for d in docs]

        rows.append(
            f"| GT.M on {cell.params['filesystem']} | {cell.params['workload']['threen1']['keys']} "
            f"| {_spread(metric('elapsed_s'), '.2f')} | {_spread(metric('worker_cpu_s'), '.2f')} "
            f"| {_spread(metric('reads_per_s'), ',.0f')} | {_spread(metric('updates_per_s'), ',.0f')} "
            f"| {statistics.median(metric('database_bytes')) / 1e6:.0f} "
            f"| {statistics.median(metric('journal_bytes')) / 1e6:.0f} |"
        )
    for keys in ("spelled", "integer"):
        runs_ = [run_in_memory(1, 1_000_000, keys) for _ in range(REPEATS)]
        wall = [r["elapsed_s"] for r in runs_]
        reads = [r["reads"] / r["elapsed_s"] for r in runs_]
        updates = [r["updates"] / r["elapsed_s"] for r in runs_]
        rows.append(
            f"| in-memory Python dict, 1 process | {keys} | {_spread(wall, '.2f')} "
            f"| {_spread([r['cpu_s'] for r in runs_], '.2f')} | {_spread(reads, ',.0f')} "
            f"| {_spread(updates, ',.0f')} | - | - |"
        )
    prov = provenance.collect()
    print(
        f"3n+1 1..1,000,000, 4 workers, block 50,000; median (min..max) of {REPEATS} runs; "
        f"{datetime.now(UTC):%Y-%m-%d}, {prov['cpu_model']} × {prov['cpu_count']}, "
        f"{prov['memory_kib'] // 2**20} GiB, kernel {platform.release()}, git {prov['git']['sha'][:10]}\n"
    )
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.micro")
