"""The per-operation work metrics a run's result gets beside time (agent/work.py, job._device_metrics):
a number where measured, None with the reason where not, never 0 for "not measured"."""

from __future__ import annotations

from typing import Any

from fsmatrix.agent import job, work
from fsmatrix.agent.contract import Outcome
from fsmatrix.agent.parsing import parse_cell

NAMES = [m.name for m in work.WORK_METRICS]
NO_PMU = "no hardware counters (perf_event_open: ENOENT)"


def samples(flushes: int | None = 30, counts: dict[str, int | None] | None = None) -> dict[str, Any]:
    """What the sampler and the counters hand _device_metrics, as this host gives them: 200,000
    updates' worth of IO and calls, no PMU."""
    counted = {"instructions": None, "cycles": None, "context_switches": 4000, "fsync": 40, "fdatasync": 10}
    return {
        "io": {"reads": 100, "read_bytes": 409600, "writes": 3000, "write_bytes": 24576000, "busy_pct": 20.0}
        | {"flushes": flushes},
        "cpu_s": {"user": 1.0, "nice": 0.0, "system": 0.5, "idle": 0.0, "iowait": 0.1, "irq": 0.0, "softirq": 0.0},
        "run_cpu_s": {"user": 1.2, "system": 0.4},
        "counters": {
            "counts": counted | (counts or {}),
            "unavailable": {"instructions": NO_PMU, "cycles": NO_PMU},
        },
    }


THREEN1 = {"filesystem": "ext4", "workload": {"threen1": {"start": 1, "end": 1000}}}
OUTCOME = Outcome(metrics={"elapsed_s": 2.0, "updates": 200000}, verification={"status": "passed"})


def test_every_work_metric_per_database_update_or_why_not() -> None:
    metrics, unavailable = job._device_metrics(parse_cell(THREEN1), OUTCOME, samples())
    assert metrics["operations"] == 200000
    assert metrics["device_write_bytes_per_op"] == 122.88 and metrics["device_read_bytes_per_op"] == 2.048
    assert metrics["device_write_ios_per_op"] == 0.015 and metrics["device_read_ios_per_op"] == 0.0005
    assert metrics["device_ios_per_op"] == 0.0155 and metrics["device_flushes_per_op"] == 0.00015
    # 50 calls in 200,000 updates: kept to six significant digits, not rounded away to 0.
    assert metrics["fsyncs_per_op"] == 0.00025 and metrics["context_switches_per_op"] == 0.02
    assert metrics["instructions_per_op"] is None and metrics["cycles_per_op"] is None
    assert unavailable == {"instructions_per_op": NO_PMU, "cycles_per_op": NO_PMU}
    assert set(NAMES) <= set(metrics) and metrics["cpu_busy_s"] == 1.6


def test_a_kernel_without_flush_counts_and_a_run_without_counters_say_why() -> None:
    bare = samples(flushes=None)
    del bare["counters"]  # a document of a runner that had none: every perf-based metric says so
    metrics, unavailable = job._device_metrics(parse_cell(THREEN1), OUTCOME, bare)
    assert metrics["device_flushes_per_op"] is None and unavailable["device_flushes_per_op"] == work.NO_FLUSHES
    assert {m for m, v in metrics.items() if v is None} == set(unavailable)
    assert unavailable["fsyncs_per_op"] == "not counted"
    # One of fsync and fdatasync not counted: their sum is not known.
    metrics, unavailable = job._device_metrics(parse_cell(THREEN1), OUTCOME, samples(counts={"fdatasync": None}))
    assert metrics["fsyncs_per_op"] is None and unavailable["fsyncs_per_op"] == "not counted"


def test_a_crash_cell_has_no_per_operation_figures_and_says_why() -> None:
    cell = parse_cell({**THREEN1, "crash": {"mode": "kill", "after_s": 1}})
    metrics, unavailable = job._device_metrics(cell, OUTCOME, samples())
    assert all(metrics[n] is None for n in NAMES) and "operations" not in metrics
    assert unavailable == dict.fromkeys(NAMES, work.CRASH_CELL)
    assert metrics["device_write_bytes"] == 24576000  # the totals stay


def test_no_operations_reported() -> None:
    cell = parse_cell(THREEN1)
    metrics, unavailable = job._device_metrics(cell, Outcome({"updates": 0}, {"status": "passed"}), samples())
    assert all(metrics[n] is None for n in NAMES)
    assert set(unavailable.values()) == {"the workload reported no operations (one operation: a database update)"}


def test_the_work_metrics_are_listed_once_lower_is_better() -> None:
    assert len(set(NAMES)) == len(NAMES) and all(m.better == "lower" and m.title for m in work.WORK_METRICS)
    assert all(n.endswith("_per_op") for n in NAMES)


def test_a_device_missing_from_diskstats_leaves_the_device_totals_not_measured() -> None:
    missing = samples() | {"io": dict.fromkeys(samples()["io"]), "io_missing": ["md127"]}
    metrics, unavailable = job._device_metrics(parse_cell(THREEN1), OUTCOME, missing)
    for name in ("device_write_bytes_per_op", "device_ios_per_op", "device_flushes_per_op"):
        assert metrics[name] is None and unavailable[name] == "not in /proc/diskstats: md127"
    assert metrics["fsyncs_per_op"] == 0.00025  # the counters still count


def test_a_stripes_flushes_are_counted_at_its_disks_not_its_md_device() -> None:
    # issue 51: a bio-based md / dm device may leave the flush field 0: the disks got the flushes
    stripe = samples(flushes=0) | {"components": {"io": {"flushes": 80}, "io_missing": []}}
    metrics, _ = job._device_metrics(parse_cell(THREEN1), OUTCOME, stripe)
    assert metrics["device_flushes_per_op"] == 0.0004
    unlisted = samples(flushes=0) | {"components": {"io": {"flushes": None}, "io_missing": ["loop9"]}}
    metrics, unavailable = job._device_metrics(parse_cell(THREEN1), OUTCOME, unlisted)
    assert metrics["device_flushes_per_op"] is None and "loop9" in unavailable["device_flushes_per_op"]
