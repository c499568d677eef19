"""``fsmatrix compare``'s output: the table (terminal, Markdown), its summary lines and JSON, and the
lines of the gate with confirmation."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict
from typing import Any

from rich.table import Table

from fsmatrix.results.verdict import outcome, stats
from fsmatrix.results.verdict.environment import ENV_AXES, format_env_diffs
from fsmatrix.results.verdict.gate import CompareResult, Confirmed, MetricComparison


def _num(value: float) -> str:
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _ci(c: stats.Comparison) -> str:
    """The interval, and "range" when it is the runs' range rather than a 95 % interval (stats.INTERVALS)."""
    if math.isnan(c.ci_low):
        return "-"
    return f"{c.ci_low:.3f}..{c.ci_high:.3f}" + (" range" if c.interval == "range" else "")


def _verdict(row: MetricComparison) -> str:
    text = row.comparison.verdict
    if row.comparison.significant:
        text += f" {abs(row.comparison.worse_by) * 100:.1f}%"
    return text + (" REGRESSION" if row.regression else "")


def _p(row: MetricComparison) -> str:
    c = row.comparison
    if math.isnan(c.p_value):
        return "-"
    return f"{c.p_value:.3g}" + (f" (Holm {row.p_holm:.3g})" if row.gated and not math.isnan(row.p_holm) else "")


HEADERS = ("cell", "metric", "gate", "better", "n", "base median", "head median", "ratio", "interval", "p", "verdict")


def _cells(row: MetricComparison) -> list[str]:
    c = row.comparison
    return [
        row.cell_id,
        row.metric,
        "gated" if row.gated else "advisory",
        row.direction,
        f"{c.n_base}/{c.n_head}",
        _num(c.median_base),
        _num(c.median_head),
        "-" if math.isnan(c.ratio) else f"{c.ratio:.3f}",
        _ci(c),
        _p(row),
        _verdict(row),
    ]


def rich_table(result: CompareResult) -> Table:
    table = Table(title=f"{result.base} → {result.head}")
    for header in HEADERS:
        table.add_column(header, no_wrap=header == "cell")
    colours = {"slower": "red", "faster": "green", "not enough data": "yellow"}
    for row in result.rows:
        cells = _cells(row)
        colour = colours.get(row.comparison.verdict)
        if colour:
            cells[-1] = f"[{colour}]{cells[-1]}[/{colour}]"
        table.add_row(*cells)
    return table


def summary_lines(result: CompareResult) -> list[str]:
    lines = []
    for name, b, h in result.across:
        matched = "; cells matched by every other setting (rows name BASE's cell)" if name in ENV_AXES else ""
        lines.append(f"compared across {name}s (--across {name}): base {', '.join(b)} | head {', '.join(h)}{matched}")
    if result.across:
        on_purpose = [key for key, _, _ in result.env_diffs if key in result.explained]
        lines.append(f"differing on purpose: {', '.join(on_purpose) or 'nothing'}")
    unexplained = [diff for diff in result.env_diffs if diff[0] not in result.explained]
    if unexplained:
        lines += ["environments differ (compared anyway, --allow-env-diff):", format_env_diffs(unexplained)]
    if result.only_base:
        lines.append(f"only in base (not compared): {', '.join(result.only_base)}")
    if result.only_head:
        lines.append(f"only in head (not compared): {', '.join(result.only_head)}")
    counts: dict[str, int] = defaultdict(int)
    for row in result.rows:
        counts[row.comparison.verdict] += 1
    lines.append("; ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    if result.threshold is not None:
        gated = sorted({r.metric for r in result.rows if r.gated and r.metric not in result.work})
        work = [m for m in result.work if any(r.gated and r.metric == m for r in result.rows)]
        work_words = f" and on work, {work_thresholds(result, work)}," if work else ""
        lines.append(
            f"the gate decides on {', '.join(gated) or 'nothing'} (each workload's declaration){work_words} p-values "
            f"Holm-adjusted across all {sum(r.gated for r in result.rows)} of those tests; the other rows are advisory"
        )
        lines += left_out_lines(result)
        lines += verdict_lines(result)
    if any(r.comparison.interval == "range" for r in result.rows):
        lines.append(
            "interval: the bootstrap's 95 % interval of the ratio of medians (paired: the t-interval of the pairs); "
            f"'range': fewer than {stats.BOOTSTRAP_MIN} runs a side, the range of the runs' ratios, which claims no "
            "coverage (a 95 % bootstrap interval there covers about 90 %)"
        )
    return lines


def work_thresholds(result: CompareResult, metrics: list[str]) -> str:
    """``device_write_bytes_per_op +2.0%, fsyncs_per_op +10.0%``: work metrics with their thresholds."""
    return ", ".join(f"{m} +{result.work[m]:.1%}" for m in metrics)


def left_out_lines(result: CompareResult) -> list[str]:
    """The work metrics the gate left out, one line for each reason, naming the cells."""
    by_reason: dict[tuple[str, str], list[str]] = defaultdict(list)
    for cell_id, metric, why in result.work_left_out:
        by_reason[(metric, why)].append(cell_id)
    return [
        f"not gated: {metric} ({why}) in {', '.join(cells)}; a work metric counts where both sides measured it"
        for (metric, why), cells in by_reason.items()
    ]


def regression_words(row: MetricComparison) -> str:
    """``cell metric ×1.083 [1.071..1.095] (+8.3%, threshold +2.0%)``: what a FAIL names."""
    c = row.comparison
    threshold = f", threshold +{row.threshold:.1%}" if row.threshold is not None else ""
    return f"{row.cell_id} {row.metric} ×{c.ratio:.3f} [{_ci(c)}] (+{c.worse_by:.1%}{threshold})"


def verdict_lines(result: CompareResult) -> list[str]:
    """The gate's rules and its verdict, PASS, FAIL or NOT DECIDED (``outcome``), in words."""
    threshold = result.threshold or 0.0
    lines = [f"the gate's rule: a regression is {stats.regression_rule(threshold, result.fail_level)}"]
    own = [m for m in result.work if any(r.gated and r.metric == m for r in result.rows)]
    lines.append(
        f"a PASS needs every gated metric shown not worse than +{threshold:.1%}"
        + (f" (work metrics: their own, {work_thresholds(result, own)})" if own else "")
        + f": a one-sided test against that threshold at {result.pass_level:.3g} (on the pairs' log ratios when "
        "paired), the upper bound below it"
    )
    if result.looks:
        lines.append(
            f"the gate adds pairs until decided, looking after {result.looks} pairs: every look's tests at Pocock's "
            f"level for those looks (FAIL {result.fail_level:.3g} two-sided after Holm, PASS {result.pass_level:.3g})"
        )
    regs = result.regressions
    if result.verdict == outcome.FAIL:
        found = []
        if regs:
            names = ", ".join(regression_words(r) for r in regs)
            found.append(f"{len(regs)} regression(s), significant with an estimate above its threshold: {names}")
        if result.stopped:
            found.append(
                f"{len(result.stopped)} durability metric(s) stopped: " + "; ".join(s.words for s in result.stopped)
            )
        lines.append("GATE FAILED: " + "; and ".join(found))
    elif result.verdict == outcome.PASS:
        shown = "; ".join(
            f"{r.cell_id} {r.metric} at most +{r.bound.upper:.1%}" for r in result.rows if r.gated and r.bound
        )
        lines.append(f"gate PASSED: every gated metric shown not worse than its threshold ({shown})")
    else:
        lines.append(
            "gate NOT DECIDED: nothing significantly worse with an estimate above its threshold, and not shown "
            f"below it: {'; '.join(not_decided_sentence(r) for r in result.undecided)}"
        )
    return lines


def not_decided_sentence(row: MetricComparison) -> str:
    """What a gated row's pairs rule out, and about how many would decide."""
    b = row.bound
    where = f"{row.cell_id} {row.metric}"
    if b is None:
        return f"{where}: too few pairs or runs (or a value <= 0) to test"
    paired = row.comparison.test == "paired-log"
    unit, spread = ("pairs", "pair spread") if paired else ("runs a side", "run-to-run spread")
    advice = f"about {b.pairs_needed} {unit} would decide" if b.pairs_needed else "no number of runs in reach decides"
    return (
        f"{where}: at the measured {spread} of {b.spread:.1%}, {b.n} {unit} rule out only regressions above "
        f"{b.upper:.1%} (estimate {b.estimate:+.1%}); {advice}"
    )


def markdown(result: CompareResult) -> str:
    lines = [f"## fsmatrix compare: {result.base} → {result.head}", ""]
    lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for row in result.rows:
        cells = _cells(row)
        if row.regression:
            cells[-1] = f"**{cells[-1]}**"
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines.append("")
    for line in summary_lines(result):
        lines.append(f"- {line}" if not line.startswith("  ") else f"  - {line.strip()}")
    return "\n".join(lines) + "\n"


def to_json(result: CompareResult, not_decided: str = "distinct") -> dict[str, Any]:
    def clean(value: Any) -> Any:
        return None if isinstance(value, float) and not math.isfinite(value) else value

    def bound(row: MetricComparison) -> dict[str, Any]:
        b = row.bound
        if result.threshold is None:
            return {}
        if b is None:
            return {"bound": None}
        return {"bound": {**{k: clean(v) for k, v in asdict(b).items()}, "shown": b.shown}}

    gate = (
        {
            "verdict": result.verdict,
            "looks": list(result.looks.sizes) if result.looks else None,
            "fail_level": result.fail_level,
            "pass_level": result.pass_level,
            "work_thresholds": dict(result.work),
            "work_left_out": [{"cell_id": c, "metric": m, "why": w} for c, m, w in result.work_left_out],
            "stopped": [asdict(s) for s in result.stopped],
        }
        if result.threshold is not None
        else {}
    )
    return {
        "base": result.base,
        "head": result.head,
        "threshold": result.threshold,
        "env_diffs": [{"key": k, "base": b, "head": h} for k, b, h in result.env_diffs],
        "across": [{"name": k, "base": b, "head": h} for k, b, h in result.across],
        "only_base": result.only_base,
        "only_head": result.only_head,
        "rows": [
            {
                "cell_id": r.cell_id,
                "metric": r.metric,
                "direction": r.direction,
                "regression": r.regression,
                "gated": r.gated,
                "p_holm": clean(r.p_holm),
                **({"threshold": r.threshold} if result.threshold is not None else {}),
                "noise_floor": r.noise_floor,
                **{k: clean(v) for k, v in r.comparison.to_dict().items()},
                **bound(r),
            }
            for r in result.rows
        ],
        **gate,
        "exit_status": result.exit_status(not_decided),
    }


def confirmation_lines(gate: Confirmed) -> list[str]:
    """The gate with confirmation, a line per flagged regression and the verdict."""

    def figures(row: MetricComparison) -> str:
        c = row.comparison
        return f"{c.ratio:.3f} [{_ci(c)}], p Holm {row.p_holm:.2g}, n {c.n_base}/{c.n_head}"

    lines = []
    for row, again in gate.confirmed:
        lines.append(
            f"CONFIRMED regression: {row.cell_id} {row.metric} +{again.comparison.worse_by:.1%} "
            f"(first batch {figures(row)}; confirmation {figures(again)})"
        )
    for row, again in gate.not_confirmed:
        lines.append(
            f"not confirmed: {row.cell_id} {row.metric} flagged +{row.comparison.worse_by:.1%} "
            f"(first batch {figures(row)}), not again (confirmation {figures(again)}: {again.comparison.verdict})"
        )
    for row in gate.not_rerun:
        lines.append(
            f"UNCONFIRMABLE regression: {row.cell_id} {row.metric} +{row.comparison.worse_by:.1%} "
            f"(first batch {figures(row)}) has no confirmation runs: the gate fails"
        )
    lines += _stopped_confirmation_lines(gate)
    threshold = gate.first.threshold or 0.0
    if not gate.first.flagged:
        lines.append("nothing to confirm: the first batch found no regression")
    if gate.verdict == outcome.FAIL:
        lines.append(f"GATE FAILED after confirmation (threshold {threshold:.1%})")
    elif gate.first.flagged:
        lines.append(
            f"gate NOT DECIDED after confirmation (threshold {threshold:.1%}): the first batch's regression did not "
            "hold in the second, and a PASS needs the first batch's own test to show the change below the threshold"
        )
    elif gate.verdict == outcome.PASS:
        lines.append(f"gate PASSED (threshold {threshold:.1%}): nothing to confirm, every gated metric shown below it")
    else:
        lines.append(
            f"gate NOT DECIDED (threshold {threshold:.1%}): nothing to confirm, not shown below it: "
            + "; ".join(not_decided_sentence(r) for r in gate.first.undecided)
        )
    return lines


def _stopped_confirmation_lines(gate: Confirmed) -> list[str]:
    """A line per durability metric the first batch found stopped: again in the second batch, not, or not rerun."""
    again, not_again, not_rerun = gate.stopped_again()
    return (
        [f"CONFIRMED durability lost: {s.words}; none again in the confirmation batch" for s in again]
        + [f"not confirmed: {s.words}; the confirmation batch measured some" for s in not_again]
        + [f"UNCONFIRMABLE durability lost: {s.words}; no confirmation runs: the gate fails" for s in not_rerun]
    )
