"""Reports for people and tools: one self-contained HTML page, a CSV of every run, Apache Otava's CSV.

The page opens with the answer (verdict/answering.py), then one forest plot per comparison group (each
configuration's ratio to the baseline with its interval), then the details, collapsed: the
environment, the tables with their charts, the per-run time series, the crash table and the runs.

The HTML page loads nothing from anywhere: styles are inline, charts are matplotlib figures
embedded as inline SVG (text drawn as paths, so no fonts are fetched either), and a
Content-Security-Policy of ``default-src 'none'`` tells the browser to refuse any fetch that
slipped in. matplotlib because it is already a dependency, draws error bars and shaded spans
directly, and writes static SVG that needs no JavaScript.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from pathlib import Path

import matplotlib

from fsmatrix.agent import workloads
from fsmatrix.results.render import answer_text, crashtable, effects, seed, tables
from fsmatrix.results.render.charts import (
    MAX_SERIES_RUNS_PER_CELL,
    bar_chart,
    figure,
    forest_chart,
    series_chart,
)
from fsmatrix.results.render.sentences import said
from fsmatrix.results.store import Result
from fsmatrix.results.verdict import answer, environment, groups, hardware
from fsmatrix.results.verdict.report import Report

matplotlib.rcParams["svg.fonttype"] = "path"  # text as outlines: nothing to fetch, same look everywhere
matplotlib.rcParams["svg.hashsalt"] = "fsmatrix"  # stable element ids, reproducible output

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 80em; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #eee; }
td.best { font-weight: bold; background: #e6f4e6; }
td.open { background: #f4f4e6; }
td.equivalent { background: #e6eef4; }
.warn { background: #fff3cd; border: 1px solid #e0c36c; padding: 0.5em; }
figure { margin: 0.5em 0 1.5em; }
figure svg { max-width: 100%; height: auto; }
figcaption { font-size: 0.9em; color: #555; }
tr.failed td { background: #f8e0e0; }
section.answer { border-left: 4px solid #4a7; padding: 0.2em 1em; margin-bottom: 1.5em; }
section.answer h3 { margin-bottom: 0.3em; }
p.headline { font-size: 1.1em; }
.unsafe { color: #b00; font-weight: bold; }
details > summary { cursor: pointer; font-size: 1.2em; font-weight: bold; margin: 1em 0; }
"""


# ----------------------------------------------------------------------------------- charts


def _answer_html(found: answer.Answer) -> list[str]:
    """The answer section and the forest plots: what the page opens with."""

    def text(sentence: str) -> str:
        return html.escape(sentence).replace("UNSAFE", '<span class="unsafe">UNSAFE</span>')

    parts = [
        '<section class="answer" id="answer">',
        "<h2>The answer</h2>",
        f"<p>{html.escape(answer_text.intro(found))}</p>",
    ]
    if not found.groups:
        parts.append("<p>No results to answer from.</p>")
    for g in found.groups:
        words = said(g, found.delta)
        heading = answer_text.group_heading(g)
        parts += [
            f"<h3>{html.escape(heading)}</h3>",
            f'<p class="headline"><strong>{text(words.headline)}</strong></p>',
        ]
        if words.details:
            parts.append("<ul>" + "".join(f"<li>{text(s)}</li>" for s in words.details) + "</ul>")
        if isinstance(g, answer.SpeedGroup) and g.effects is not None:
            parts += effects.html_parts(g.effects, g.metric_words)
    parts.append("</section>")
    speed = [g for g in found.groups if isinstance(g, answer.SpeedGroup) and g.metric is not None]
    charts = [(g, forest_chart(g)) for g in speed]
    charts = [(g, svg) for g, svg in charts if svg]
    if charts:
        parts += ['<section class="forest" id="forest">', "<h2>Ratio to the baseline</h2>"]
        for g, svg in charts:
            caption = (
                f"{g.label}: {g.metric_words} of each configuration over {g.group.baseline_name}'s, ratio of geometric "
                f"means and its interval (the group's intervals hold together at {found.confidence:.0%})"
            )
            parts.append(f'<figure class="chart forest">{svg}<figcaption>{html.escape(caption)}</figcaption></figure>')
        parts.append("</section>")
    return parts


# ----------------------------------------------------------------------------------- html


def _grid_table(
    columns: list[str],
    rows: list[tuple[str, dict[str, list[float] | str]]],
    placed: dict[str, dict[str, groups.Ranked]],
    regimes: dict[tuple[str, str], str],
) -> str:
    out = ["<table><tr><th>input</th>", *(f"<th>{html.escape(c)}</th>" for c in columns), "</tr>"]
    for row, entries in rows:
        ranked = placed[row]
        out.append(f"<tr><td>{html.escape(row)}</td>")
        for col in columns:
            if col not in ranked:
                out.append(f"<td>{html.escape(str(entries.get(col, '')))}</td>")
                continue
            r = ranked[col]
            notes = [] if r.ratio == 1.0 or not math.isfinite(r.ratio) else [f"{r.ratio:.2f}× the best median"]
            notes += [r.mark] if r.mark and r.mark != "best" else []
            text = f"{tables.number(r.median)}{r.spread}" + (f" ({', '.join(notes)})" if notes else "")
            tag = regimes.get((row, col), "")
            text += f" [{tag}]" if tag else ""
            css = {"best": ' class="best"', "not separated": ' class="open"', "equivalent": ' class="equivalent"'}.get(
                r.mark, ""
            )
            out.append(f"<td{css}>{html.escape(text)}</td>")
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def _plain_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def html_report(found: Report, title: str) -> str:
    """The whole page: the answer, the forest plots, then the details collapsed."""
    docs = found.results  # an image axis: side by side in the tables
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>fsmatrix report: {html.escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>fsmatrix report: {html.escape(title)}</h1>",
    ]
    parts += _answer_html(found.answer)
    parts.append('<details class="details"><summary>Details: environment, tables, charts and runs</summary>')
    parts += _environment(docs)
    legend_shown = False
    margin = tables.work_margin(found.answer)  # the work rows' words' margin
    by_cell: dict[str, list[Result]] = defaultdict(list)
    for doc in docs:
        by_cell[doc.cell_id].append(doc)
    for kind, metrics in tables.metric_tables(by_cell).items():
        cells = {cid: ds for cid, ds in by_cell.items() if ds[0].workload == kind}
        if not cells:
            continue
        parts.append(f"<h2>{html.escape(kind)}</h2>")
        if kind in workloads.WORKLOADS and workloads.get(kind).note:
            parts.append(f"<p>{html.escape(workloads.get(kind).note)}</p>")
        found_classes = hardware.classes([d for ds in cells.values() for d in ds])
        if len(found_classes) > 1:
            parts.append(f'<p class="legend">{html.escape(hardware.why(found_classes))}</p>')
        for heading, group in tables.workload_groups(kind, cells):
            if heading:
                parts.append(f"<h3>{html.escape(heading)}</h3>")
            for otitle, header, rows_ in tables.overview_tables(kind, group):
                parts += [f"<h4>{html.escape(otitle)}</h4>", _plain_table(header, rows_)]
            for metric, mtitle, direction in metrics:
                if not tables.tabled(group, metric):
                    continue
                columns, rows = tables.metric_grid(kind, group, metric)
                if not columns:
                    continue
                better = "lower" if direction == "lower" else "higher"
                if not legend_shown:  # once per page
                    legend = tables.TABLE_LEGEND.replace("**bold**", "bold")
                    parts.append(f'<p class="legend">How to read the tables: {html.escape(legend)}.</p>')
                    legend_shown = True
                note = f"{better} is better; {tables.repeats_note(rows)}"
                parts.append(f"<h4>{html.escape(mtitle)} ({html.escape(note)})</h4>")
                placed = tables.ranks(kind, group, metric, direction, alpha=found.answer.alpha, work_delta=margin)
                parts.append(_grid_table(columns, rows, placed, tables.regime_grid(kind, group)))
                parts.append(figure(bar_chart(columns, rows, mtitle), f"{mtitle}: median, whiskers min..max"))
        for rtitle, header, rows_ in [
            *tables.environment_axis_tables(kind, cells),
            *tables.relative_speed_tables(kind, cells),
        ]:
            parts += [f"<h4>{html.escape(rtitle)}</h4>", _plain_table(header, rows_)]
    parts += _runs_html(docs, by_cell)
    parts.append("</details>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _runs_html(docs: list[Result], by_cell: dict[str, list[Result]]) -> list[str]:
    """The seed section, the per-run time series, the crash table and the runs' statuses."""
    parts: list[str] = []
    parts += seed.html_parts(docs)  # a seed matrix's results beside the seed's published tables
    parts.append("<h2>Per-run time series</h2>")
    parts.append(
        "<p>Per second: device throughput, CPU use and IO rate with device utilisation. Shaded seconds are the ones "
        "the sampler classed as IO-bound.</p>"
    )
    for cid, ds in sorted(by_cell.items()):
        shown = [d for d in sorted(ds, key=lambda d: d.repeat) if d.status == "passed"]
        for doc in shown[:MAX_SERIES_RUNS_PER_CELL]:
            svg = series_chart(doc)
            if svg:
                parts.append(figure(svg, f"{cid} repeat {doc.repeat}"))
            else:
                parts.append(
                    f"<p>{html.escape(cid)} repeat {doc.repeat}: no per-second samples (shorter than 1 s).</p>"
                )
    parts += crashtable.html_section(docs)
    parts.append("<h2>Runs and verification</h2>")
    status_rows = []
    for cid, ds in sorted(by_cell.items()):
        statuses = ", ".join(f"{s}×{[d.status for d in ds].count(s)}" for s in sorted({d.status for d in ds}))
        reasons = "; ".join(sorted({str(d.reason) for d in ds if d.reason}))
        ver = ds[0].verification.status or "-"
        status_rows.append([cid, str(len(ds)), statuses, ver, reasons])
    parts.append(_plain_table(["cell", "runs", "status", "verification", "reason"], status_rows))
    return parts


def _environment(docs: list[Result]) -> list[str]:
    envs = environment.environments(docs)
    items = "".join(f"<li>{html.escape(k)}: {html.escape(', '.join(sorted(v)))}</li>" for k, v in envs.items())
    out = ["<h2>Environment</h2>", f"<ul>{items}</ul>"]
    mixed = environment.mixed_environments(docs)
    if mixed:
        out.append(
            f'<p class="warn">These results come from different environments ({html.escape(", ".join(mixed))}); '
            "numbers across them are not comparable.</p>"
        )
    return out


def write_html(found: Report, title: str, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "report.html"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(html_report(found, title), encoding="utf-8")
    tmp.replace(path)
    return path


# ----------------------------------------------------------------------------------- csv
