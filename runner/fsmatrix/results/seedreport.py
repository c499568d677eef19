"""The report's "Against the published results" section: a seed matrix's results beside the tables
its seed published, and the seed's claims checked against them.

A matrix file names the published tables it reproduces (``reproduces:``, matrix/README.md); the
results' run directory records the matrix file it was run from (``matrix.json``), so the report
finds them. Per table, both sides are normalised the way the seed presents them ("x the best", or
speed relative to a baseline entry: absolute numbers from 2002-2011 hardware are not comparable,
ratios and rankings are), with Kendall's tau between the two rankings. Each claim is marked
holds / does not hold / not distinguishable / not measured, by the test ``fsmatrix compare`` uses
(stats.compare_samples: Mann-Whitney U or Welch's t on logs, alpha 0.05, a bootstrap interval of
the ratio excluding 1): a difference inside the noise of the repeats never "holds".
"""

from __future__ import annotations

import html
import itertools
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from scipy import stats as sps

from fsmatrix.errors import UserError
from fsmatrix.matrix import flatten
from fsmatrix.results import published, stats

HOLDS, FAILS, NOISE, MISSING = "holds", "does not hold", "not distinguishable", "not measured"
VERDICTS = (HOLDS, FAILS, NOISE, MISSING)
LEGEND = (
    "Both sides normalised as the seed presents them; ours are medians of the passed repeats. "
    "Kendall's tau compares the two rankings of the entries both sides have (1: the same order, "
    "-1: reversed). A claim holds only when every comparison it rests on is significant by the test "
    "`fsmatrix compare` uses (Mann-Whitney U or Welch's t on logs, alpha = 0.05, and a bootstrap "
    "interval of the ratio excluding 1; no correction for the several comparisons of one claim); "
    "it does not hold when one is significant the other way; otherwise it is not distinguishable. "
    "Not measured: an entry it names has no passed runs here."
)

Samples = dict[tuple[str, str], list[float]]  # (row, column) -> passed runs' values


@dataclass
class TableView:
    table: published.Table
    samples: Samples
    stand_ins: list[str]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    claim: published.Claim
    verdict: str
    evidence: str


# ----------------------------------------------------------------------------- finding the tables


def reproduced(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``reproduces`` entries of the matrix files these results were run from (every scale's:
    a stand-in maps one scale's input and never matches another's cells), merged per table."""
    files: set[Path] = set()
    for doc in docs:
        if "_path" not in doc:
            continue
        record = Path(doc["_path"]).parent.parent / "matrix.json"
        try:
            matrix_file = yaml.safe_load(record.read_text(encoding="utf-8")).get("file")
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if matrix_file:
            files.add(Path(matrix_file))
    merged: dict[str, dict[str, Any]] = {}
    for path in sorted(files):
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(doc, dict):
            continue
        entries = list(doc.get("reproduces") or [])
        for scale in (doc.get("scales") or {}).values():
            if isinstance(scale, dict):
                entries += list(scale.get("reproduces") or [])
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("table"), str):
                continue
            into = merged.setdefault(entry["table"], {"table": entry["table"], "stand_in": []})
            for item in entry.get("stand_in") or []:
                if item not in into["stand_in"]:
                    into["stand_in"].append(item)
    return list(merged.values())


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


def view(table: published.Table, stand_in: list[dict[str, Any]], docs: list[dict[str, Any]]) -> TableView:
    """The passed runs of ``docs`` placed in ``table``'s rows and columns."""
    by_cell: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for doc in docs:
        by_cell[doc["cell_id"]].append(doc)
    samples: Samples = {}
    owner: dict[tuple[str, str], str] = {}
    notes: list[str] = []
    for cell_id, ds in by_cell.items():
        if ds[0].get("workload") != table.workload:
            continue
        flat = flatten(ds[0].get("params") or {})
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
                float(d["metrics"][metric])
                for d in ds
                if d.get("status") == "passed" and isinstance(d.get("metrics", {}).get(metric), int | float)
            ]
            key = (row, col)
            if key in owner:
                notes.append(f"{row}:{col}: cells {owner[key]} and {cell_id} both map here; showing the first")
                continue
            owner[key] = cell_id
            samples[key] = values
    shown = [f"our {i['setting']} = {i['ours']} stands for the seed's {i['theirs']}" for i in stand_in]
    return TableView(table, samples, shown, notes)


# ----------------------------------------------------------------------------- normalising


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


# ----------------------------------------------------------------------------- claims


def _pair(a: list[float], b: list[float], direction: str) -> stats.Comparison:
    """A against B; verdict "faster" means A is significantly better than B."""
    return stats.compare_samples(b, a, direction)


def _evidence(label: str, c: stats.Comparison, direction: str) -> str:
    factor = (1 / c.ratio if direction == "lower" else c.ratio) if c.ratio and not math.isnan(c.ratio) else math.nan
    if c.verdict == "not enough data":
        return f"{label}: {c.n_head} vs {c.n_base} runs, too few to test"
    return f"{label}: {factor:.2f}x better, p = {c.p_value:.3g} ({c.test}, {c.n_head} vs {c.n_base} runs)"


def evaluate(claim: published.Claim, tv: TableView) -> Verdict:
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


# ----------------------------------------------------------------------------- rendering

Block = tuple[str, Any]  # ("h3", text) | ("p", text) | ("table", (header, rows))


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _norm_text(value: float | None, present: str) -> str:
    if value is None:
        return ""
    return f"{value:.0%}" if present == "relative_to" else f"{value:.2f}x"


def table_blocks(tv: TableView) -> list[Block]:
    table = tv.table
    blocks: list[Block] = [("h3", f"{table.id}: {table.title}"), ("p", f"Source: {table.source}.")]
    if table.note:
        blocks.append(("p", table.note))
    if tv.stand_ins:
        blocks.append(("p", "Stand-in: " + "; ".join(tv.stand_ins) + "."))
    for note in tv.notes:
        blocks.append(("p", note))
    how = "x the best" if table.present == "times_best" else f"relative to {table.baseline}"
    for series in table.series_labels():
        entries = table.entry_labels()
        pub = {e: table.values[table.cell(series, e)] for e in entries if table.cell(series, e) in table.values}
        ours = {e: tv.samples.get(table.cell(series, e), []) for e in entries}
        if not any(ours.values()):
            continue
        direction = table.direction(series if table.series == "column" else entries[0])
        pub_norm = pub if table.normalised else normalise(pub, direction, table.present, table.baseline)
        medians = {e: statistics.median(v) for e, v in ours.items() if v}
        ours_norm = normalise(medians, direction, table.present, table.baseline)
        unit = next((table.units[table.cell(series, e)] for e in pub), "")
        header = [
            f"{table.series} {series}",
            f"published ({unit})" if not table.normalised else "published",
            f"published, {how}",
            # The metric names its unit (lat_avg_ms, elapsed_s), which may differ from the seed's.
            f"ours ({table.metric_for(series if table.series == 'column' else entries[0])}: median, runs)",
            f"ours, {how}",
        ]
        rows = []
        for e in entries:
            if e not in pub and not ours.get(e):
                continue
            values = ours.get(e) or []
            ours_text = f"{_fmt(statistics.median(values))} ({len(values)})" if values else "not measured"
            rows.append(
                [
                    e,
                    "" if e not in pub or table.normalised else _fmt(pub[e]),
                    _norm_text(pub_norm.get(e), table.present),
                    ours_text,
                    _norm_text(ours_norm.get(e), table.present),
                ]
            )
        blocks.append(("table", (header, rows)))
        # Kendall's tau on the normalised values: both sides then order entries the same way round.
        tau, n = kendall(pub_norm, ours_norm)
        tau_text = f"{tau:.2f} over {n} entries" if not math.isnan(tau) else f"not defined ({n} common entries)"
        blocks.append(("p", f"Kendall's tau ({series}): {tau_text}."))
    return blocks


def blocks(docs: list[dict[str, Any]], directory: Path = published.DEFAULT_DIR) -> list[Block]:
    """The section's content; empty when these results reproduce no published table."""
    wanted = reproduced(docs)
    if not wanted:
        return []
    out: list[Block] = [("h2", "Against the published results"), ("p", LEGEND)]
    try:
        data = published.load(directory)
    except UserError as exc:
        return [*out, ("p", f"The published data could not be read: {exc}")]
    views: dict[str, TableView] = {}
    for entry in wanted:
        table = data.tables.get(entry["table"])
        if table is None:
            out.append(("p", f"The matrix names table {entry['table']}, which is not in the published data."))
            continue
        tv = view(table, entry["stand_in"], docs)
        views[table.id] = tv
        out += table_blocks(tv)
    claims = [c for c in data.claims if c.table in views]
    if claims:
        rows = []
        for claim in claims:
            v = evaluate(claim, views[claim.table])
            rows.append([claim.id, claim.says, claim.text, v.verdict, v.evidence])
        out += [("h3", "Claims"), ("table", (["claim", "the seed says", "checked as", "verdict", "evidence"], rows))]
        counts = ", ".join(f"{sum(r[3] == v for r in rows)} {v}" for v in VERDICTS)
        out.append(("p", f"{len(rows)} claims: {counts}."))
    return out


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(docs: list[dict[str, Any]], directory: Path = published.DEFAULT_DIR) -> list[str]:
    lines: list[str] = []
    for kind, content in blocks(docs, directory):
        if kind in ("h2", "h3"):
            lines += [f"{'#' * int(kind[1])} {content}", ""]
        elif kind == "p":
            lines += [content, ""]
        else:
            header, rows = content
            lines += ["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            lines.append("")
    return lines


def html_parts(docs: list[dict[str, Any]], directory: Path = published.DEFAULT_DIR) -> list[str]:
    parts: list[str] = []
    for kind, content in blocks(docs, directory):
        if kind in ("h2", "h3"):
            parts.append(f"<{kind}>{html.escape(content)}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{html.escape(content)}</p>")
        else:
            header, rows = content
            head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
            body = "".join(
                "<tr>" + "".join(f'<td class="{_css(c)}">{html.escape(c)}</td>' for c in row) + "</tr>" for row in rows
            )
            parts.append(f"<table><tr>{head}</tr>{body}</table>")
    return parts


def _css(text: str) -> str:
    return {HOLDS: "holds", FAILS: "fails", NOISE: "noise", MISSING: "missing"}.get(text, "")
