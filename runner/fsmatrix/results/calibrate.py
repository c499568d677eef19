"""Calibration: how noisy is this runner, and what can the gate see at N runs a side?

``fsmatrix calibrate MATRIX --runs N`` runs the matrix's cells twice, N repeats each time, as two
separate runs (an A/A pair: same code, same settings, one after the other, as a BASE and a HEAD
run would be). Every repeat is its own mkfs, mount and set of processes, so the pooled 2N values
of a cell's metric carry the between-run variance the gate has to live with (variance inside one
run understates it). From that pool, per cell and metric:

- ``spread``: the between-run spread, exp(sd of ln values) - 1;
- ``aa``: the gate's verdict on the real A/A pair;
- ``false_positive_rate``: the share of random N-vs-N splits of the pool the gate calls a
  regression (nothing changed, so every call is false), with the spread as noise floor as the gate
  will use it (and ``false_positive_rate_without_floor``);
- ``min_detectable``: the smallest slowdown (of 1 %, 2 %, 3 %, 5 %, … 100 %) the gate, with that
  noise floor, catches in 80 % of splits when it is injected into the HEAD half.

Stored as JSON under ``<results root>/calibration/<matrix>-<environment hash>.json``; the gate
uses the spread as a per-cell, per-metric noise floor when the environment matches.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fsmatrix.agent import jsonfile
from fsmatrix.errors import UserError
from fsmatrix.results import compare, stats

CALIBRATION_DIR = "calibration"
FORMAT_VERSION = 1


def calibrate_sides(
    a: list[dict[str, Any]],
    b: list[dict[str, Any]],
    *,
    matrix_name: str,
    runs: int,
    alpha: float = stats.ALPHA,
    threshold: float = 0.0,
    trials: int = 200,
) -> dict[str, Any]:
    """The calibration document for an A/A pair of runs (``a`` and ``b``, N repeats per cell each)."""
    docs = a + b
    if not docs:
        raise UserError("calibration: no result documents")
    side_a, side_b = compare.Side("A", a), compare.Side("B", b)
    by_a, by_b = side_a.by_cell(), side_b.by_cell()
    cells: dict[str, dict[str, Any]] = {}
    gate: dict[str, Any] = {"threshold": threshold, "alpha": alpha}
    for cell_id in sorted(set(by_a) | set(by_b)):
        ca, cb = by_a.get(cell_id, []), by_b.get(cell_id, [])
        metrics: dict[str, Any] = {}
        for metric, direction in compare.compared_metrics(ca + cb).items():
            va, vb = compare.metric_values(ca, metric), compare.metric_values(cb, metric)
            pool = va + vb
            spread = stats.log_spread(pool)
            floor = spread if math.isfinite(spread) else 0.0
            aa = stats.compare_samples(va, vb, direction, alpha=alpha)
            metrics[metric] = {
                "direction": direction,
                "runs": len(pool),
                "median": stats.median(pool) if pool else None,
                "spread": _finite(spread),
                "aa_verdict": aa.verdict,
                "aa_ratio": _finite(aa.ratio),
                # as the gate will run once this calibration is stored: with the spread as noise floor
                "false_positive_rate": _finite(
                    stats.split_rates(pool, runs, direction, **gate, noise_floor=floor, trials=trials)
                ),
                "false_positive_rate_without_floor": _finite(
                    stats.split_rates(pool, runs, direction, **gate, trials=trials)
                ),
                "min_detectable": _finite(
                    stats.min_detectable_effect(pool, runs, direction, **gate, noise_floor=floor, trials=trials // 2)
                ),
            }
        cells[cell_id] = metrics
    return {
        "format_version": FORMAT_VERSION,
        "matrix": matrix_name,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs_per_side": runs,
        "alpha": alpha,
        "threshold": threshold,
        "environment": compare.environment(docs),
        "env_hash": compare.env_hash(docs),
        "cells": cells,
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def path_for(results_root: Path, matrix_name: str, env_hash: str) -> Path:
    return results_root / CALIBRATION_DIR / f"{matrix_name}-{env_hash}.json"


def save(calibration: dict[str, Any], results_root: Path) -> Path:
    path = path_for(results_root, calibration["matrix"], calibration["env_hash"])
    path.parent.mkdir(parents=True, exist_ok=True)
    jsonfile.write_atomic(path, calibration)
    return path


def load(path: Path) -> dict[str, Any]:
    try:
        doc = jsonfile.read(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable calibration ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("format_version") != FORMAT_VERSION or "cells" not in doc:
        raise UserError(f"{path}: not an fsmatrix calibration (format version {FORMAT_VERSION})")
    cells = doc["cells"]
    if not isinstance(cells, dict):
        raise UserError(f"{path}: 'cells' must map cell ids to {{metric: {{spread: number}}}}")
    for cell_id, metrics in cells.items():
        if not isinstance(metrics, dict):
            raise UserError(f"{path}: cells.{cell_id} must map metrics to {{spread: number, ...}}")
        for metric, entry in metrics.items():
            spread = entry.get("spread") if isinstance(entry, dict) else entry
            if not isinstance(entry, dict) or (
                spread is not None and (isinstance(spread, bool) or not isinstance(spread, int | float))
            ):
                raise UserError(
                    f"{path}: cells.{cell_id}.{metric} must be {{spread: number or null, ...}}, got {entry!r}"
                )
    return doc


def find(results_root: Path, docs: list[dict[str, Any]]) -> list[Path]:
    """Stored calibrations made in the same environment as ``docs``, newest last."""
    directory = results_root / CALIBRATION_DIR
    if not directory.is_dir():
        return []
    wanted = compare.env_hash(docs)
    return sorted(directory.glob(f"*-{wanted}.json"), key=lambda p: p.stat().st_mtime)


def noise_floors(calibrations: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(cell id, metric) → measured between-run spread; later calibrations override earlier ones."""
    floors: dict[tuple[str, str], float] = {}
    for cal in calibrations:
        for cell_id, metrics in cal["cells"].items():
            for metric, entry in metrics.items():
                if entry.get("spread") is not None:
                    floors[(cell_id, metric)] = float(entry["spread"])
    return floors


def markdown(calibration: dict[str, Any]) -> str:
    n = calibration["runs_per_side"]
    lines = [
        f"## fsmatrix calibration: {calibration['matrix']} ({n} runs a side, environment {calibration['env_hash']})",
        "",
        "| cell | metric | runs | median | between-run spread | A/A verdict | false-positive rate | "
        f"smallest detectable slowdown at {n} runs |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value * 100:.1f}%"

    for cell_id, metrics in calibration["cells"].items():
        for metric, e in metrics.items():
            median = "-" if e["median"] is None else f"{e['median']:.4g}"
            mde = "none up to 100%" if e["min_detectable"] is None else pct(e["min_detectable"])
            lines.append(
                f"| {cell_id} | {metric} | {e['runs']} | {median} | ±{pct(e['spread'])} | {e['aa_verdict']} "
                f"| {pct(e['false_positive_rate'])} | {mde} |"
            )
    return "\n".join(lines) + "\n"
