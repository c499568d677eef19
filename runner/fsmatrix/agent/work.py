"""What the storage stack did per unit of work: the per-operation metrics run_job adds to every
workload's metrics, beside time.

One operation is what the workload declares (``Workload.operation``: a 3n+1 database update, a
sysbench/fio IO request, a pgbench transaction). Divided by their count: what the data devices
did (bytes, IO requests and flush requests, from /proc/diskstats: ``sampler``) and what the run's
own processes did (fsync and fdatasync calls, CPU instructions and cycles, context switches: perf
counters on its cgroup, ``counters``), all over the measured window. Counts like these move far less
than wall time on a busy machine.

``WORK_METRICS`` lists them, in one place (the results side imports it; lower is better for all).
Every one is in a run's ``metrics``: a number, or None when it was not measured, and then its
reason is in the document's ``metrics_unavailable`` (never 0 for "not measured").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsmatrix.agent.contract import Metric

WORK_METRICS: tuple[Metric, ...] = (
    Metric("device_write_bytes_per_op", "Device bytes written per operation", "bytes/op", "lower"),
    Metric("device_read_bytes_per_op", "Device bytes read per operation", "bytes/op", "lower"),
    Metric("device_ios_per_op", "Device IO requests per operation", "IOs/op", "lower"),
    Metric("device_write_ios_per_op", "Device write requests per operation", "IOs/op", "lower"),
    Metric("device_read_ios_per_op", "Device read requests per operation", "IOs/op", "lower"),
    Metric("device_flushes_per_op", "Device flush requests per operation", "flushes/op", "lower"),
    Metric("fsyncs_per_op", "fsync and fdatasync calls per operation", "calls/op", "lower"),
    Metric("instructions_per_op", "CPU instructions per operation", "instructions/op", "lower"),
    Metric("cycles_per_op", "CPU cycles per operation", "cycles/op", "lower"),
    Metric("context_switches_per_op", "Context switches per operation", "switches/op", "lower"),
)

NO_FLUSHES = "the kernel does not report flush requests in /proc/diskstats (Linux 5.5+ does)"
CRASH_CELL = "a crash cell: its outcome counts the resumed work, not the crashed part these totals cover"


def total_of(metric: Metric) -> str:
    """The name of the total ``metric`` divides by the operations: device_write_bytes_per_op's is
    device_write_bytes (the same count as the run's metric of that name)."""
    return metric.name.removesuffix("_per_op")


def totals(samples: Mapping[str, Any]) -> tuple[dict[str, float | None], dict[str, str]]:
    """Over the measured window, for each of ``WORK_METRICS``: the total it divides by the operations,
    keyed by ``total_of`` (None where not measured), and why not ({total: reason})."""
    io = samples["io"]
    counters = samples.get("counters") or {}
    counts = counters.get("counts") or {}
    missing = counters.get("unavailable") or {}
    values: dict[str, float | None] = {
        "device_write_bytes": io["write_bytes"],
        "device_read_bytes": io["read_bytes"],
        "device_ios": None if io["reads"] is None else io["reads"] + io["writes"],
        "device_write_ios": io["writes"],
        "device_read_ios": io["reads"],
        # A stripe's flushes are counted at its disks: the md / dm device is bio-based and may leave
        # the flush field empty (0, not "not measured"); by the layout, never by the values.
        "device_flushes": (samples["components"]["io"] if "components" in samples else io).get("flushes"),
    }
    reasons = {} if values["device_flushes"] is not None else {"device_flushes": NO_FLUSHES}
    for total in ("device_write_bytes", "device_read_bytes", "device_ios", "device_write_ios", "device_read_ios"):
        _unlisted(values, reasons, total, samples)
    _unlisted(values, reasons, "device_flushes", samples.get("components") or samples)
    events = {
        "fsyncs": ("fsync", "fdatasync"),
        "instructions": ("instructions",),
        "cycles": ("cycles",),
        "context_switches": ("context_switches",),
    }
    for total, names in events.items():
        found = [counts.get(n) for n in names]
        if all(isinstance(v, int | float) for v in found):
            values[total] = sum(v for v in found if v is not None)
        else:
            values[total] = None
            why = [missing.get(n) or "not counted" for n, v in zip(names, found, strict=True) if v is None]
            reasons[total] = "; ".join(dict.fromkeys(why))
    return values, reasons


def _unlisted(values: dict[str, float | None], reasons: dict[str, str], total: str, samples: Mapping[str, Any]) -> None:
    """A device total not measured where a device it sums was missing from /proc/diskstats."""
    if samples.get("io_missing"):
        values[total] = None
        reasons[total] = f"not in /proc/diskstats: {', '.join(samples['io_missing'])}"


def per_op(
    samples: Mapping[str, Any], operations: float | None, no_operations: str
) -> tuple[dict[str, float | None], dict[str, str]]:
    """``WORK_METRICS`` over ``operations`` (None or 0: none, ``no_operations`` says why): their values
    (None where not measured) and the reasons for the Nones ({metric: reason})."""
    values, total_reasons = totals(samples)
    out: dict[str, float | None] = {}
    reasons: dict[str, str] = {}
    for metric in WORK_METRICS:
        total = values[total_of(metric)]
        if not operations:
            out[metric.name] = None
            reasons[metric.name] = no_operations
        elif total is None:
            out[metric.name] = None
            reasons[metric.name] = total_reasons[total_of(metric)]
        elif metric.name in ("device_write_bytes_per_op", "device_read_bytes_per_op"):
            out[metric.name] = round(total / operations, 3)  # as these two were always written
        else:
            out[metric.name] = float(f"{total / operations:.6g}")
    return out, reasons
