"""``fsmatrix calibrate``'s output: the noise it measured, per cell and metric, in Markdown."""

from __future__ import annotations

from typing import Any


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _alarms(hits: int, pairs: int, ci: list[float | None]) -> str:
    """ "1/6 (17%, 95% CI 0.4%-64%)" """
    if not pairs:
        return "-"
    low, high = ci
    return f"{hits}/{pairs} ({hits / pairs:.0%}, 95% CI {_pct(low)}-{_pct(high)})"


def markdown(calibration: dict[str, Any]) -> str:
    n, k = calibration["runs_per_batch"], calibration["batches"]
    gate = calibration["gate"]
    wo, wf = gate["without_floors"], gate["with_floors"]
    lines = [
        f"## fsmatrix calibration: {calibration['matrix']} ({k} batches of {n} runs, "
        f"environment {calibration['env_hash']})",
        "",
        f"The gate (`compare --fail-on-regression {calibration['threshold'] * 100:g}%`) on the {wo['pairs']} pairs of "
        f"batches {', '.join(calibration['batch_runs'])} (earlier as BASE): "
        f"{_alarms(wo['hits'], wo['pairs'], wo['ci'])} false alarms without noise floors, "
        f"{_alarms(wf['hits'], wf['pairs'], wf['ci'])} with them. In-sample: the floors come from these "
        "same batches, and pairs share batches.",
        "",
        "| cell | metric | runs | median | within-batch spread | between-batch spread | largest batch change "
        f"| noise floor | false alarms with floor | without floor | smallest detectable slowdown at {n} runs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell_id, metrics in calibration["cells"].items():
        for metric, e in metrics.items():
            median = "-" if e["median"] is None else f"{e['median']:.4g}"
            mde = "none up to 100%" if e["min_detectable"] is None else _pct(e["min_detectable"])
            lines.append(
                f"| {cell_id} | {metric} | {e['runs']} | {median} | ±{_pct(e['within_batch_spread'])} "
                f"| ±{_pct(e['between_batch_spread'])} | {_pct(e['largest_batch_change'])} | {_pct(e['noise_floor'])} "
                f"| {_alarms(e['false_alarms'], e['pairs'], e['false_positive_ci'])} "
                f"| {_alarms(e['false_alarms_without_floor'], e['pairs'], e['false_positive_ci_without_floor'])} "
                f"| {mde} |"
            )
    return "\n".join(lines) + "\n"
