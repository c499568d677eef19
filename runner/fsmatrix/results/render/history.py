"""``fsmatrix history`` in words: JSON (every series, its points and change points) and Markdown (the
change points with what changed, then one line per series). Every number is the verdict's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fsmatrix.results.store.schema import WORK
from fsmatrix.results.verdict.history import NOTHING_RECORDED, ChangePoint, History


def _number(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else value


def change_point_json(cp: ChangePoint) -> dict[str, Any]:
    return {
        "index": cp.index,
        "time": cp.time,
        "before_run": cp.before_run,
        "after_run": cp.after_run,
        "ratio": _number(cp.ratio),
        "interval": [_number(cp.interval[0]), _number(cp.interval[1])],
        "p": cp.p,
        "changed": cp.changed,
        "bisect": cp.bisect,
    }


def to_json(histories: Sequence[History], *, detector: str, threshold: float) -> dict[str, Any]:
    return {
        "detector": detector,
        "threshold": threshold,
        "series": [
            {
                "cell_id": h.series.cell_id,
                "metric": h.series.metric,
                "kind": h.series.kind,
                "direction": h.series.direction,
                "hardware_class": h.series.hardware_class,
                "comparison_group": h.series.group_label,
                "points": [
                    {"time": p.time, "run_id": p.run_id, "repeat": p.repeat, "value": p.value, "host": p.host}
                    for p in h.series.points
                ],
                "change_points": [change_point_json(cp) for cp in h.change_points],
            }
            for h in histories
        ],
    }


def _value(value: Any) -> str:
    return "–" if value is None else str(value)


def changed_text(cp: ChangePoint) -> str:
    """What changed, in one line: ``gtm.global_buffers 35000 → 64; settings – → gb64.yaml (…)``."""
    if not cp.changed:
        return NOTHING_RECORDED
    return "; ".join(f"{name} {_value(b)} → {_value(a)}" for name, (b, a) in cp.changed.items())


def metric_words(kind: str, direction: str) -> str:
    """How a series' metric reads beside its name: ``lower is better``; ``work per operation, lower is
    better`` for a work metric (the agent's WORK_METRICS) that no run declared key."""
    return ("work per operation, " if kind == WORK else "") + f"{direction} is better"


def ratio_text(cp: ChangePoint) -> str:
    low, high = cp.interval
    return f"×{cp.ratio:.3f} (95 % CI {low:.3f}–{high:.3f})"


def markdown(histories: Sequence[History], *, shown: str, detector: str, threshold: float) -> str:
    found = [(h, cp) for h in histories for cp in h.change_points]
    attributed = sum(1 for _, cp in found if cp.attributed)
    lines = [
        f"## History of {shown}",
        "",
        f"{len(histories)} series, {sum(len(h.series.points) for h in histories):,} points; "
        f"{len(found)} change points ({attributed} attributed to a recorded change) by {detector}, p ≤ {threshold:g}.",
        "",
    ]
    if found:
        lines += [
            "| cell | hardware class | metric | at | before → after | ratio | p | what changed |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for h, cp in found:
            lines.append(
                f"| {h.series.cell_id} | {h.series.hardware_class} | {h.series.metric} | {cp.time} | "
                f"{cp.before_run} → {cp.after_run} | {ratio_text(cp)} | {cp.p:.2g} | {changed_text(cp)} |"
            )
            if cp.bisect:
                lines.append(f"|  |  |  |  |  |  |  | bisect: `{cp.bisect}` |")
        lines.append("")
    if histories:
        lines += [
            "| cell | hardware class | metric | points | first | last | change points |",
            "|---|---|---|---|---|---|---|",
        ]
        for h in histories:
            s = h.series
            lines.append(
                f"| {s.cell_id} | {s.hardware_class} | {s.metric} ({metric_words(s.kind, s.direction)}) | "
                f"{len(s.points)} | "
                f"{s.points[0].time} | {s.points[-1].time} | {len(h.change_points)} |"
            )
    return "\n".join(lines) + "\n"
