"""Calibration: how far do batches of the same code drift apart on this runner, and what can the gate see?

``fsmatrix calibrate MATRIX --runs N --batches K`` runs the matrix's cells K times, N repeats each
time, as K separate runs one after the other (each its own run id, as a BASE and a HEAD run are).
Every repeat is its own mkfs, mount and set of processes. A gate compares the median of one batch
with the median of another, so what it must not mistake for a regression is how much **batch
medians** move between batches of identical code; the spread of repeats inside one batch
understates that whenever the machine drifts (a neighbour starts, the page cache or CPU clock
settles). Random splits of one pooled sample cannot show drift either: they mix both batches into
each half and recover the test's nominal level by construction. So, per cell and metric:

- ``within_batch_spread``: exp(pooled sd of ln values inside each batch) - 1;
- ``between_batch_spread``: exp(sd of ln batch medians) - 1, how far one batch's median moves;
- ``largest_batch_change``: the largest change between two batch medians actually seen;
- ``noise_floor``, what the gate uses: the change between two batch medians that batches of the
  same code exceed only alpha of the time (if ln medians scatter normally), exp(t · √2 · sd of ln
  batch medians) - 1 with t the 1 - alpha/2 quantile of Student's t on K - 1 degrees of freedom
  (the difference of two medians has √2 times their sd; t rather than the normal quantile because
  the sd comes from only K medians: this is a prediction bound for the next pair, not a guess at
  it), and never below ``within_batch_spread``;
- ``false_positive_rate``: over the K·(K-1)/2 pairs of real batches (the earlier one as BASE, the
  later as HEAD), the share that the test compare uses calls a regression, with the noise floor
  and without it (``false_positive_rate_without_floor``), each with a 95 % Clopper-Pearson interval;
- ``min_detectable``: the smallest slowdown (of 1 %, 2 %, 3 %, 5 %, … 100 %) that, injected into
  the later batch of each pair, the gate with the noise floor catches in 80 % of the pairs.

And for the whole matrix (``gate``): the gate itself (``compare --fail-on-regression``: gated
metrics only, Holm across them) on every pair of batches, without and with the floors.

Both rates are **in-sample**: the floors were measured on the very batches they are tested on, so
the rate with floors is optimistic, and the pairs share batches, so the intervals (which treat
pairs as independent) are too narrow. A later A/A pair (``python -m fsmatrix.bench.gate``) is the
out-of-sample check.

Stored as JSON under ``<results root>/calibration/<matrix>-<environment hash>.json``; the gate
uses ``noise_floor`` as a per-cell, per-metric noise floor when the environment matches.
"""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
from scipy import stats as sps

from fsmatrix.errors import UserError
from fsmatrix.results.store import Result
from fsmatrix.results.store.calibrations import FORMAT_VERSION
from fsmatrix.results.store.sides import Side
from fsmatrix.results.verdict import environment, gate, stats
from fsmatrix.results.verdict.metrics import compared_metrics, metric_values

DEFAULT_BATCHES = 4
BATCH_LABELS = "abcdefghijklmnopqrstuvwxyz"  # run ids calibrate-<matrix>-a, -b, … (a and b: format 1's pair)
DETECTION_POWER = 0.8


def batch_label(k: int) -> str:
    """The run id suffix of batch ``k`` (0-based)."""
    if not 0 <= k < len(BATCH_LABELS):
        raise UserError(f"calibration: at most {len(BATCH_LABELS)} batches, not {k + 1}")
    return BATCH_LABELS[k]


# ----------------------------------------------------------------------------------- spreads


def within_batch_spread(batches: list[list[float]]) -> float:
    """exp(pooled sd of ln values inside each batch) - 1: the spread of repeats with the drift
    between batches taken out. 0.0 when nothing varies; nan when it cannot be measured (no batch
    with two values, or values <= 0 that vary: they have no logarithm)."""
    squares, dof = 0.0, 0
    for values in batches:
        if len(values) < 2:
            continue
        if len(set(values)) > 1:
            if min(values) <= 0:
                return math.nan
            logs = np.log(np.asarray(values, dtype=float))
            squares += float(np.sum((logs - logs.mean()) ** 2))
        dof += len(values) - 1
    return math.expm1(math.sqrt(squares / dof)) if dof else math.nan


def _log_medians(medians: list[float]) -> np.ndarray | None:
    """ln of the batch medians; None when they cannot be compared as ratios (fewer than two, or
    values <= 0 that differ)."""
    if len(medians) < 2:
        return None
    if len(set(medians)) == 1:
        return np.zeros(len(medians))  # no movement, even of zeros
    if min(medians) <= 0:
        return None
    logs: np.ndarray = np.log(np.asarray(medians, dtype=float))
    return logs


def between_batch_spread(medians: list[float]) -> float:
    """exp(sd of ln batch medians) - 1: how far one batch's median moves (nan: not measurable)."""
    logs = _log_medians(medians)
    return math.nan if logs is None else math.expm1(float(np.std(logs, ddof=1)))


def largest_batch_change(medians: list[float]) -> float:
    """The largest relative change between two of these batch medians (0.1: one is 10 % above another)."""
    logs = _log_medians(medians)
    return math.nan if logs is None else math.expm1(float(np.ptp(logs)))


def between_batch_floor(medians: list[float], alpha: float = stats.ALPHA) -> float:
    """The change between two batch medians of the same code that only ``alpha`` of pairs exceed,
    if ln batch medians scatter normally: exp(t · √2 · sd) - 1, t from Student's t on K - 1
    degrees of freedom, which widens the bound for an sd estimated from only K medians."""
    logs = _log_medians(medians)
    if logs is None:
        return math.nan
    sd = float(np.std(logs, ddof=1))
    t = float(sps.t.ppf(1 - alpha / 2, len(logs) - 1))
    return math.expm1(t * math.sqrt(2) * sd)


def gate_floor(within: float, between_floor: float) -> float:
    """The gate's floor: the between-batch one, and never below the within-batch spread (nan: neither)."""
    finite = [v for v in (within, between_floor) if math.isfinite(v)]
    return max(finite) if finite else math.nan


# ----------------------------------------------------------------------------------- pairs of batches


def batch_pairs(k: int) -> list[tuple[int, int]]:
    """Every pair of K batches, earlier first: the earlier plays BASE, the later HEAD, as in a gate."""
    return list(itertools.combinations(range(k), 2))


def _worse(values: list[float], effect: float, direction: str) -> list[float]:
    """``values`` made ``effect`` worse: times for lower-is-better, divided for higher-is-better."""
    factor = 1 + effect if direction == "lower" else 1 / (1 + effect)
    return [v * factor for v in values]


def pair_regressions(
    batches: list[list[float]],
    direction: str,
    *,
    effect: float = 0.0,
    alpha: float = stats.ALPHA,
    threshold: float = 0.0,
    noise_floor: float = 0.0,
) -> list[bool]:
    """For each pair of batches with enough runs on both sides, whether the test compare uses
    (stats.compare_samples, then stats.is_regression) calls the later batch, made ``effect``
    worse, a regression against the earlier. With effect 0 every True is a false alarm."""
    outcomes = []
    for i, j in batch_pairs(len(batches)):
        base, head = batches[i], batches[j]
        if len(base) < stats.MIN_SAMPLES or len(head) < stats.MIN_SAMPLES:
            continue  # "not enough data" is no verdict: counting it would dilute the rate
        worse = _worse(head, effect, direction)
        c = stats.compare_samples(base, worse, direction, alpha=alpha, noise_floor=noise_floor)
        outcomes.append(stats.is_regression(c, threshold))
    return outcomes


def min_detectable(
    batches: list[list[float]],
    direction: str,
    *,
    power: float = DETECTION_POWER,
    alpha: float = stats.ALPHA,
    threshold: float = 0.0,
    noise_floor: float = 0.0,
) -> float:
    """The smallest slowdown in stats.EFFECT_GRID that, injected into the later batch of each pair,
    the gate calls a regression in at least ``power`` of the pairs; inf when none (or no pair)."""
    for effect in stats.EFFECT_GRID:
        hits = pair_regressions(
            batches, direction, effect=effect, alpha=alpha, threshold=threshold, noise_floor=noise_floor
        )
        if not hits:
            return math.inf
        if sum(hits) >= power * len(hits):
            return effect
    return math.inf


def _rate(outcomes: list[bool]) -> dict[str, Any]:
    hits, n = sum(outcomes), len(outcomes)
    low, high = stats.clopper_pearson(hits, n)
    return {
        "hits": hits,
        "pairs": n,
        "rate": hits / n if n else None,
        "ci": [_finite(low), _finite(high)],
    }


# ----------------------------------------------------------------------------------- the document


def calibrate_batches(
    batches: list[list[Result]],
    *,
    matrix_name: str,
    runs: int,
    run_ids: list[str] | None = None,
    alpha: float = stats.ALPHA,
    threshold: float = 0.0,
) -> dict[str, Any]:
    """The calibration document for K >= 2 batches of result documents (N repeats per cell each),
    in the order they ran."""
    if len(batches) < 2:
        raise UserError(f"calibration: needs at least 2 batches to see drift between them, got {len(batches)}")
    docs = [d for batch in batches for d in batch]
    if not docs:
        raise UserError("calibration: no result documents")
    labels = run_ids or [batch_label(k) for k in range(len(batches))]
    for label, batch in zip(labels[1:], batches[1:], strict=True):
        diffs = environment.env_differences(batches[0], batch)
        if diffs:  # the gate would refuse to compare these batches: their drift is not noise
            raise UserError(
                f"calibration: batch {label} ran in another environment than batch {labels[0]}:\n"
                + environment.format_env_diffs(diffs)
            )
    by_batch = [Side(label, batch).by_cell() for label, batch in zip(labels, batches, strict=True)]
    cells: dict[str, dict[str, Any]] = {}
    floors: dict[tuple[str, str], float] = {}
    for cell_id in sorted({c for cells_of in by_batch for c in cells_of}):
        cell_docs = [cells_of.get(cell_id, []) for cells_of in by_batch]
        metrics: dict[str, Any] = {}
        for metric, direction in compared_metrics([d for ds in cell_docs for d in ds]).items():
            values = [metric_values(ds, metric) for ds in cell_docs]
            entry = {"direction": direction, **_metric_entry(values, direction, alpha=alpha, threshold=threshold)}
            metrics[metric] = entry
            if entry["noise_floor"] is not None:
                floors[(cell_id, metric)] = entry["noise_floor"]
        cells[cell_id] = metrics
    return {
        "format_version": FORMAT_VERSION,
        "matrix": matrix_name,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "batches": len(batches),
        "batch_runs": labels,
        "runs_per_batch": runs,
        "alpha": alpha,
        "threshold": threshold,
        "environment": environment.environment(docs),
        "env_hash": environment.env_hash(docs),
        "gate": _gate_rates(batches, labels, floors, alpha=alpha, threshold=threshold),
        "cells": cells,
    }


def _metric_entry(batches: list[list[float]], direction: str, *, alpha: float, threshold: float) -> dict[str, Any]:
    """One cell's metric over K batches: spreads, floor, false alarms and detectable slowdown."""
    # A batch with too few runs (failures) has no median the gate would compare: leave it out.
    medians = [stats.median(v) if len(v) >= stats.MIN_SAMPLES else None for v in batches]
    present = [m for m in medians if m is not None]
    within = within_batch_spread(batches)
    floor = gate_floor(within, between_batch_floor(present, alpha))
    gate = {"alpha": alpha, "threshold": threshold}
    pooled = [v for values in batches for v in values]
    with_floor = _rate(pair_regressions(batches, direction, **gate, noise_floor=floor if math.isfinite(floor) else 0))
    without_floor = _rate(pair_regressions(batches, direction, **gate))
    return {
        "runs": len(pooled),
        "median": stats.median(pooled) if pooled else None,
        "batch_medians": medians,
        "within_batch_spread": _finite(within),
        "between_batch_spread": _finite(between_batch_spread(present)),
        "largest_batch_change": _finite(largest_batch_change(present)),
        "noise_floor": _finite(floor),
        "pairs": with_floor["pairs"],
        "false_alarms": with_floor["hits"],
        "false_positive_rate": with_floor["rate"],
        "false_positive_ci": with_floor["ci"],
        "false_alarms_without_floor": without_floor["hits"],
        "false_positive_rate_without_floor": without_floor["rate"],
        "false_positive_ci_without_floor": without_floor["ci"],
        "min_detectable": _finite(
            min_detectable(batches, direction, **gate, noise_floor=floor if math.isfinite(floor) else 0)
        ),
    }


def _gate_rates(
    batches: list[list[Result]],
    labels: list[str],
    floors: dict[tuple[str, str], float],
    *,
    alpha: float,
    threshold: float,
) -> dict[str, Any]:
    """The gate as ``compare --fail-on-regression`` runs it (gated metrics, Holm) on every pair of batches."""
    without: list[bool] = []
    with_floors: list[bool] = []
    for i, j in batch_pairs(len(batches)):
        base, head = Side(labels[i], batches[i]), Side(labels[j], batches[j])
        for outcomes, pair_floors in ((without, {}), (with_floors, floors)):
            result = gate.compare(base, head, gate.Judging(threshold, alpha, pair_floors))
            outcomes.append(result.exit_status() == 1)
    return {"without_floors": _rate(without), "with_floors": _rate(with_floors)}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


# ----------------------------------------------------------------------------------- storage


def noise_floors(calibrations: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(cell id, metric) → the measured between-batch noise floor; later calibrations override earlier ones."""
    floors: dict[tuple[str, str], float] = {}
    for cal in calibrations:
        for cell_id, metrics in cal["cells"].items():
            for metric, entry in metrics.items():
                if entry.get("noise_floor") is not None:
                    floors[(cell_id, metric)] = float(entry["noise_floor"])
    return floors


# ----------------------------------------------------------------------------------- output
