"""The report's "Against the published results" section: a seed matrix's results beside the tables
its seed published, and the seed's claims checked against them.

A matrix file names the published tables it reproduces (``reproduces:``, matrix/README.md); the
results' run directory records the matrix file it was run from (``matrix.json``), so the report
finds them. Per table, both sides are normalised the way the seed presents them ("x the best", or
speed relative to a baseline entry: absolute numbers from 2002-2011 hardware are not comparable,
ratios and rankings are), with Kendall's tau between the two rankings. Each claim is marked
holds / does not hold / not distinguishable / not measured, by the test ``fsmatrix compare`` uses
(stats.compare_samples: Mann-Whitney U or Welch's t on logs, alpha 0.05, an interval of the ratio
excluding 1: the bootstrap's from 5 runs a side, the runs' range below): a difference inside the
noise of the repeats never "holds".
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from fsmatrix.errors import UserError
from fsmatrix.results import store
from fsmatrix.results.store import Result
from fsmatrix.results.verdict import stats
from fsmatrix.results.verdict.claims import (
    FAILS,
    HOLDS,
    MISSING,
    NOISE,
    VERDICTS,
    TableView,
    evaluate,
    kendall,
    normalise,
    view,
)

LEGEND = (
    "Both sides normalised as the seed presents them; ours are medians of the passed repeats. "
    "Kendall's tau compares the two rankings of the entries both sides have (1: the same order, "
    "-1: reversed). A claim holds only when every comparison it rests on is significant by the test "
    "`fsmatrix compare` uses (Mann-Whitney U or Welch's t on logs, alpha = 0.05, and an interval of the "
    "ratio excluding 1: the bootstrap's from 5 runs a side, the runs' range below; no correction for the "
    "several comparisons of one claim); "
    "it does not hold when one is significant the other way; otherwise it is not distinguishable. "
    "Not measured: an entry it names has no passed runs here."
)


# ----------------------------------------------------------------------------- finding the tables


# ----------------------------------------------------------------------------- normalising


# ----------------------------------------------------------------------------- claims


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
        medians = {e: stats.median(v) for e, v in ours.items() if v}
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
            ours_text = f"{_fmt(stats.median(values))} ({len(values)})" if values else "not measured"
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


def blocks(docs: list[Result], directory: Path = store.PUBLISHED_DIR) -> list[Block]:
    """The section's content; empty when these results reproduce no published table."""
    wanted = store.reproduced(docs)
    if not wanted:
        return []
    out: list[Block] = [("h2", "Against the published results"), ("p", LEGEND)]
    try:
        data = store.load_published(directory)
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


def markdown(docs: list[Result], directory: Path = store.PUBLISHED_DIR) -> list[str]:
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


def html_parts(docs: list[Result], directory: Path = store.PUBLISHED_DIR) -> list[str]:
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
