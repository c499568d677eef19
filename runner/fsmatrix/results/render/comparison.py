"""``fsmatrix compare``'s output: the table (terminal, Markdown), its summary lines and JSON, and the
lines of the gate with confirmation."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from rich.table import Table

from fsmatrix.results.verdict import stats
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
        gated = sorted({f"{r.metric}" for r in result.rows if r.gated})
        lines.append(
            f"the gate decides on {', '.join(gated) or 'nothing'} (each workload's declaration), p-values "
            f"Holm-adjusted across all {sum(r.gated for r in result.rows)} of those tests; the other rows are advisory"
        )
        lines.append(f"the gate's rule: a regression is {stats.regression_rule(result.threshold)}")
        regs = result.regressions
        if regs:
            names = ", ".join(f"{r.cell_id} {r.metric} +{r.comparison.worse_by * 100:.1f}%" for r in regs)
            lines.append(
                f"GATE FAILED: {len(regs)} regression(s), significant with an estimate above {result.threshold:.1%}: "
                f"{names}"
            )
        else:
            lines.append(f"gate passed: nothing significantly worse with an estimate above {result.threshold:.1%}")
    if any(r.comparison.interval == "range" for r in result.rows):
        lines.append(
            "interval: the bootstrap's 95 % interval of the ratio of medians (paired: the t-interval of the pairs); "
            f"'range': fewer than {stats.BOOTSTRAP_MIN} runs a side, the range of the runs' ratios, which claims no "
            "coverage (a 95 % bootstrap interval there covers about 90 %)"
        )
    return lines


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


def to_json(result: CompareResult) -> dict[str, Any]:
    def clean(value: Any) -> Any:
        return None if isinstance(value, float) and not math.isfinite(value) else value

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
                "noise_floor": r.noise_floor,
                **{k: clean(v) for k, v in r.comparison.to_dict().items()},
            }
            for r in result.rows
        ],
        "exit_status": result.exit_status(),
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
            f"not confirmed (passes): {row.cell_id} {row.metric} flagged +{row.comparison.worse_by:.1%} "
            f"(first batch {figures(row)}), not again (confirmation {figures(again)}: {again.comparison.verdict})"
        )
    for row in gate.not_rerun:
        lines.append(
            f"UNCONFIRMABLE regression: {row.cell_id} {row.metric} +{row.comparison.worse_by:.1%} "
            f"(first batch {figures(row)}) has no confirmation runs: the gate fails"
        )
    if not gate.first.regressions:
        lines.append("nothing to confirm: the first batch found no regression")
    verdict = "GATE FAILED" if gate.exit_status() else "gate passed"
    lines.append(f"{verdict} after confirmation (threshold {gate.first.threshold or 0:.1%})")
    return lines
