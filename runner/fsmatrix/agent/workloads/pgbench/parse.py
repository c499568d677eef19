"""pgbench's text output (``parse_output``) and its per-transaction log (``parse_log``), read here only."""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """pgbench's report of a transaction run (PostgreSQL 15)."""

    transactions: int
    failed: int
    tps: float  # without initial connection time
    latency_avg_ms: float
    connection_ms: float


_SUMMARY = {
    "transactions": re.compile(r"^number of transactions actually processed: (\d+)", re.M),
    "failed": re.compile(r"^number of failed transactions: (\d+)", re.M),
    "tps": re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M),
    "latency_avg_ms": re.compile(r"^latency average = ([0-9.]+) ms", re.M),
    "connection_ms": re.compile(r"^initial connection time = ([0-9.]+) ms", re.M),
}


def parse_output(text: str) -> Summary:
    """The numbers of ``pgbench`` run output; ValueError naming what is missing."""
    found: dict[str, str] = {}
    for name, pattern in _SUMMARY.items():
        match = pattern.search(text)
        if match:
            found[name] = match.group(1)
    missing = [name for name in _SUMMARY if name not in found]
    if missing:
        errors = [line.strip() for line in text.splitlines() if "error" in line.lower() or "fatal" in line.lower()]
        why = f" ({errors[0]})" if errors else ""
        raise ValueError(f"pgbench output lacks {', '.join(missing)}{why}")
    return Summary(
        transactions=int(found["transactions"]),
        failed=int(found["failed"]),
        tps=float(found["tps"]),
        latency_avg_ms=float(found["latency_avg_ms"]),
        connection_ms=float(found["connection_ms"]),
    )


@dataclass(frozen=True)
class Latencies:
    count: int  # transactions logged as completed
    failed: int  # logged as failed or skipped
    avg_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


def parse_log(lines: Sequence[str]) -> Latencies:
    """Latencies from pgbench's per-transaction log (``-l``): ``client tx time_us script epoch us ...``.

    A third field that is not a number ("failed", "skipped") counts as a failed transaction.
    Percentiles are nearest-rank.
    """
    times: list[int] = []
    failed = 0
    for line in lines:
        fields = line.split()
        if len(fields) < 6:
            if line.strip():
                raise ValueError(f"pgbench log: cannot read {line.strip()!r}")
            continue
        if fields[2].isdigit():
            times.append(int(fields[2]))
        else:
            failed += 1
    if not times:
        raise ValueError("pgbench log holds no completed transaction")
    times.sort()

    def rank(percent: int) -> float:  # nearest rank: the smallest value with percent % at or below it
        return times[max(0, -(-len(times) * percent // 100) - 1)] / 1000

    return Latencies(
        count=len(times),
        failed=failed,
        avg_ms=round(statistics.fmean(times) / 1000, 3),
        p50_ms=rank(50),
        p95_ms=rank(95),
        p99_ms=rank(99),
        max_ms=times[-1] / 1000,
    )
