"""Reading metrics out of results: a run's value of a metric, the values of passed runs, pairs by
repeat, and which metrics the gate decides on and compares."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from fsmatrix.agent import workloads
from fsmatrix.results.store import Result

# Gated next to the workload's own key metrics when a document has them (lower is better for all).
ROBUST_METRICS = ("cpu_busy_s", "device_write_bytes_per_op", "device_ios_per_op")
# The work a stack does to make writes durable: none of it where there was some is a loss of durability,
# not a saving, whatever the direction says (the gate's ``DurabilityLost``, history's ``worse_than``).
FLUSHES = "device_flushes_per_op"
DURABILITY = (FLUSHES, "fsyncs_per_op")


def metric_value(doc: Result, metric: str) -> float | None:
    metrics = doc.metrics
    if metric == "device_ios_per_op" and metric not in metrics:
        return _ios_per_op(metrics)
    value = metrics.get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _ios_per_op(metrics: Mapping[str, float | None]) -> float | None:
    # The agent divides device bytes by the workload's operation count; recover that count from it.
    per_op, total = metrics.get("device_write_bytes_per_op"), metrics.get("device_write_bytes")
    if not per_op or not total:
        return None
    ops = float(total) / float(per_op)
    return (float(metrics.get("device_reads") or 0) + float(metrics.get("device_writes") or 0)) / ops


def metric_values(docs: Sequence[Result], metric: str) -> list[float]:
    """The metric over the passed runs that have it."""
    values = [metric_value(d, metric) for d in docs if d.status == "passed"]
    return [v for v in values if v is not None]


def metric_pairs(base: Sequence[Result], head: Sequence[Result], metric: str) -> list[tuple[float, float]]:
    """(BASE, HEAD) values of the metric for each repeat number both sides passed and measured."""

    def by_repeat(docs: Sequence[Result]) -> dict[int, float]:
        values = {}
        for doc in docs:
            value = metric_value(doc, metric) if doc.status == "passed" else None
            if value is not None:
                values[doc.repeat] = value
        return values

    b, h = by_repeat(base), by_repeat(head)
    return [(b[r], h[r]) for r in sorted(set(b) & set(h))]


def gate_metrics(docs: Sequence[Result]) -> tuple[str, ...]:
    """The metrics the gate decides on for these runs of one cell: the workload's declaration
    (its primary metric, and what else it gates); for a workload the registry does not know, the
    first key metric its documents name."""
    kind = docs[0].workload if docs else None
    if kind in workloads.WORKLOADS:
        return workloads.get(kind).gate_metrics
    for doc in docs:
        for name in doc.key_metrics:
            return (str(name),)
    return ()


def compared_metrics(docs: Sequence[Result]) -> dict[str, str]:
    """Metric name → direction: the documents' key metrics, then the robust ones they have."""
    metrics: dict[str, str] = {}
    for doc in docs:
        for name, direction in doc.key_metrics.items():
            metrics.setdefault(name, direction)
    for name in ROBUST_METRICS:
        if name not in metrics and any(metric_value(d, name) is not None for d in docs):
            metrics[name] = "lower"
    return metrics


def regime(docs: Sequence[Result]) -> str:
    """Whether the passed runs were CPU-bound, IO-bound or mixed (the sampler's class, most runs')."""
    bounds = [d.samples.bound for d in docs if d.status == "passed"]
    bounds = [b for b in bounds if b]
    return max(sorted(set(bounds)), key=bounds.count) if bounds else ""
