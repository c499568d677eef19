"""A seed matrix's results placed in the tables its seed published, and the seed's claims checked.

Per table, both sides are normalised the way the seed presents them ("x the best", or speed relative
to a baseline entry: absolute numbers from 2002-2011 hardware are not comparable, ratios and rankings
are), with Kendall's tau between the two rankings. Each claim is marked holds / does not hold / not
distinguishable / not measured, by the test ``fsmatrix compare`` uses (stats.compare_samples:
Mann-Whitney U or Welch's t on logs, alpha 0.05, a bootstrap interval of the ratio excluding 1): a
difference inside the noise of the repeats never "holds".
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from scipy import stats as sps

from fsmatrix.matrix import flatten
from fsmatrix.results.store import Result
from fsmatrix.results.store.published import Claim, Table
from fsmatrix.results.verdict import stats

HOLDS, FAILS, NOISE, MISSING = "holds", "does not hold", "not distinguishable", "not measured"
VERDICTS = (HOLDS, FAILS, NOISE, MISSING)


Samples = dict[tuple[str, str], list[float]]  # (row, column) -> passed runs' values


@dataclass
class TableView:
    table: Table
    samples: Samples
    stand_ins: list[str]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    verdict: str
    evidence: str


def _same(a: Any, b: Any) -> bool:
    return bool(a == b or str(a) == str(b))


def _matches(selector: dict[str, Any], flat: dict[str, Any]) -> bool:
    return all(k in flat and _same(flat[k], v) for k, v in selector.items())


def _label(axis: dict[str, dict[str, Any] | None] | str, flat: dict[str, Any]) -> str | None:
    if isinstance(axis, str):
        return str(flat[axis]) if axis in flat else None
    for label, selector in axis.items():
        if selector is not None and _matches(selector, flat):
            return label
    return None


def view(table: Table, stand_in: list[dict[str, Any]], docs: list[Result]) -> TableView:
    """The passed runs of ``docs`` placed in ``table``'s rows and columns."""
    by_cell: dict[str, list[Result]] = defaultdict(list)
    for doc in docs:
        by_cell[doc.cell_id].append(doc)
    samples: Samples = {}
    owner: dict[tuple[str, str], str] = {}
    notes: list[str] = []
    for cell_id, ds in by_cell.items():
        if ds[0].workload != table.workload:
            continue
        flat = flatten(ds[0].params)
        for item in stand_in:
            if _same(flat.get(item["setting"]), item["ours"]):
                flat[item["setting"]] = item["theirs"]
        if not _matches(table.where, flat):
            continue
        row = _label(table.rows, flat)
        if row is None:
            continue
        columns = table.column_labels() if len(table.metrics) > 1 or "" not in table.metrics else []
        if not columns:
            col = _label(table.columns, flat)
            columns = [col] if col is not None else []
        for col in columns:
            metric = table.metric_for(col)
            values = [
                float(v) for d in ds if d.status == "passed" and isinstance(v := d.metrics.get(metric), int | float)
            ]
            key = (row, col)
            if key in owner:
                notes.append(f"{row}:{col}: cells {owner[key]} and {cell_id} both map here; showing the first")
                continue
            owner[key] = cell_id
            samples[key] = values
    shown = [f"our {i['setting']} = {i['ours']} stands for the seed's {i['theirs']}" for i in stand_in]
    return TableView(table, samples, shown, notes)


def normalise(values: dict[str, float], direction: str, present: str, baseline: str | None) -> dict[str, float]:
    """Entry -> the seed's presentation: "x the best" (1 = the best, 2 = twice as slow), or speed
    relative to ``baseline`` (1.43 = 43 % faster than it). Empty when there is nothing to divide by."""
    values = {k: v for k, v in values.items() if v > 0}
    if not values:
        return {}
    if present == "relative_to":
        if baseline not in values:
            return {}
        base = values[baseline]
        return {k: (base / v if direction == "lower" else v / base) for k, v in values.items()}
    best = min(values.values()) if direction == "lower" else max(values.values())
    return {k: (v / best if direction == "lower" else best / v) for k, v in values.items()}


def kendall(published_norm: dict[str, float], ours_norm: dict[str, float]) -> tuple[float, int]:
    """Kendall's tau between the two rankings of the entries both have, and how many there are."""
    common = [k for k in published_norm if k in ours_norm]
    if len(common) < 2:
        return math.nan, len(common)
    tau = sps.kendalltau([published_norm[k] for k in common], [ours_norm[k] for k in common]).statistic
    return float(tau), len(common)


def _pair(a: list[float], b: list[float], direction: str) -> stats.Comparison:
    """A against B; verdict "faster" means A is significantly better than B."""
    return stats.compare_samples(b, a, direction)


def _evidence(label: str, c: stats.Comparison, direction: str) -> str:
    factor = (1 / c.ratio if direction == "lower" else c.ratio) if c.ratio and not math.isnan(c.ratio) else math.nan
    if c.verdict == "not enough data":
        return f"{label}: {c.n_head} vs {c.n_base} runs, too few to test"
    return f"{label}: {factor:.2f}x better, p = {c.p_value:.3g} ({c.test}, {c.n_head} vs {c.n_base} runs)"


def evaluate(claim: Claim, tv: TableView) -> Verdict:
    table = tv.table

    def samples(row: str, col: str) -> list[float]:
        return tv.samples.get((row, col), [])

    if claim.kind == "better":
        (ra, ca), (rb, cb) = claim.cells
        a, b = samples(ra, ca), samples(rb, cb)
        missing = [f"{r}:{c}" for (r, c), v in zip(claim.cells, (a, b), strict=True) if not v]
        if missing:
            return Verdict(claim, MISSING, f"no passed runs for {', '.join(missing)}")
        direction = table.direction(ca)
        c = _pair(a, b, direction)
        text = _evidence(f"{ra}:{ca} vs {rb}:{cb}", c, direction)
        if c.verdict == "not enough data":
            return Verdict(claim, NOISE, text)
        if claim.by is None:
            verdict = HOLDS if c.verdict == "faster" else FAILS if c.verdict == "slower" else NOISE
            return Verdict(claim, verdict, text)
        # The factor A is better by, and its interval (the bootstrap interval of B/A or A/B).
        low, high = (1 / c.ci_high, 1 / c.ci_low) if direction == "lower" else (c.ci_low, c.ci_high)
        text += f"; interval of the factor [{low:.2f}, {high:.2f}], needs >= {claim.by:g}"
        if c.verdict == "faster" and low >= claim.by:
            return Verdict(claim, HOLDS, text)
        if c.verdict == "slower" or (c.significant and high < claim.by) or high < claim.by:
            return Verdict(claim, FAILS, text)
        return Verdict(claim, NOISE, text)

    series = claim.series or ""
    measured = [e for e in table.entry_labels() if samples(*table.cell(series, e))]
    if claim.kind == "order":
        chain = list(claim.entries)
        missing = [e for e in chain if e not in measured]
        if missing:
            return Verdict(claim, MISSING, f"no passed runs for {', '.join(missing)} in {series}")
        pairs = list(itertools.pairwise(chain))
    else:
        entry, among = claim.entries[0], list(claim.entries[1:])
        if entry not in measured:
            return Verdict(claim, MISSING, f"no passed runs for {entry} in {series}")
        # "Best of the six" needs all six: every entry the seed published in this series, or `among`.
        published_here = [e for e in table.entry_labels() if table.cell(series, e) in table.values]
        others = among or [e for e in dict.fromkeys([*published_here, *measured]) if e != entry]
        missing = [e for e in others if e not in measured]
        if missing or not others:
            what = ", ".join(missing) if missing else "any other entry"
            return Verdict(claim, MISSING, f"no passed runs for {what} in {series}")
        pairs = [(entry, o) if claim.kind == "best" else (o, entry) for o in others]
    results = []
    for better_one, worse_one in pairs:
        direction = table.direction(better_one if table.series == "row" else series)
        c = _pair(samples(*table.cell(series, better_one)), samples(*table.cell(series, worse_one)), direction)
        results.append((better_one, worse_one, c, direction))
    against = [r for r in results if r[2].verdict == "slower"]
    if against:
        x, y, c, d = against[0]
        return Verdict(claim, FAILS, _evidence(f"{x} vs {y}", c, d))
    weak = [r for r in results if r[2].verdict != "faster"]
    if weak:
        x, y, c, d = max(weak, key=lambda r: r[2].p_value if not math.isnan(r[2].p_value) else 2.0)
        return Verdict(claim, NOISE, _evidence(f"{x} vs {y}", c, d))
    x, y, c, d = max(results, key=lambda r: r[2].p_value)
    return Verdict(
        claim, HOLDS, f"all {len(results)} comparisons significant; weakest " + _evidence(f"{x} vs {y}", c, d)
    )
