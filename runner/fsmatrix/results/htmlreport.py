"""Reports for people and tools: one self-contained HTML page, a CSV of every run, Apache Otava's CSV.

The page opens with the answer (results/answer.py), then one forest plot per comparison group (each
configuration's ratio to the baseline with its interval), then the details, collapsed: the
environment, the tables with their charts, the per-run time series, the crash table and the runs.

The HTML page loads nothing from anywhere: styles are inline, charts are matplotlib figures
embedded as inline SVG (text drawn as paths, so no fonts are fetched either), and a
Content-Security-Policy of ``default-src 'none'`` tells the browser to refuse any fetch that
slipped in. matplotlib because it is already a dependency, draws error bars and shaded spans
directly, and writes static SVG that needs no JavaScript.
"""

from __future__ import annotations

import csv
import html
import io
import statistics
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib
import yaml
from matplotlib.figure import Figure

from fsmatrix.agent import workloads
from fsmatrix.matrix import flatten
from fsmatrix.results import answer, compare, crashtable, hardware, report, seedreport

matplotlib.rcParams["svg.fonttype"] = "path"  # text as outlines: nothing to fetch, same look everywhere
matplotlib.rcParams["svg.hashsalt"] = "fsmatrix"  # stable element ids, reproducible output

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
MAX_SERIES_RUNS_PER_CELL = 3  # time-series charts per cell: enough to see run-to-run differences

STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 80em; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #eee; }
td.best { font-weight: bold; background: #e6f4e6; }
td.tied { background: #f4f4e6; }
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


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: inline SVG needs neither


def _figure(svg: str, caption: str) -> str:
    return f'<figure class="chart">{svg}<figcaption>{html.escape(caption)}</figcaption></figure>'


# ----------------------------------------------------------------------------------- charts


def bar_chart(columns: list[str], rows: list[tuple[str, dict[str, list[float] | str]]], title: str) -> str:
    """Grouped bars: one group per input row, one bar per filesystem column; median, min..max whiskers."""
    fig = Figure(figsize=(max(4.0, 1.2 * len(columns) * len(rows) + 1.5), 3.0))
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(columns))
    for j, col in enumerate(columns):
        xs, heights, low, high = [], [], [], []
        for i, (_row, entries) in enumerate(rows):
            values = entries.get(col)
            if isinstance(values, list) and values:
                med = statistics.median(values)
                xs.append(i + (j - (len(columns) - 1) / 2) * width)
                heights.append(med)
                low.append(med - min(values))
                high.append(max(values) - med)
        ax.bar(xs, heights, width * 0.95, yerr=[low, high], capsize=3, label=col)
    ax.set_xticks(range(len(rows)), [row for row, _ in rows])
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


def series_chart(doc: dict[str, Any]) -> str | None:
    """Throughput, CPU and IO of one run, second by second; IO-bound seconds shaded."""
    series = (doc.get("samples") or {}).get("series") or []
    if not series:
        return None
    t = [float(s.get("t", i + 1)) for i, s in enumerate(series)]
    fig = Figure(figsize=(8.0, 5.0))
    axes = fig.subplots(3, 1, sharex=True)
    mib = 2**20
    axes[0].plot(t, [s.get("read_bytes_s", 0) / mib for s in series], label="read MiB/s", marker=".")
    axes[0].plot(t, [s.get("write_bytes_s", 0) / mib for s in series], label="write MiB/s", marker=".")
    axes[0].set_ylabel("MiB/s")
    for part in ("user", "system", "iowait"):
        axes[1].plot(t, [(s.get("cpu_pct") or {}).get(part, 0) for s in series], label=f"CPU {part} %", marker=".")
    axes[1].set_ylabel("CPU %")
    axes[1].set_ylim(0, 100)
    axes[2].plot(t, [s.get("reads_s", 0) + s.get("writes_s", 0) for s in series], label="IOs/s", marker=".")
    busy = axes[2].twinx()
    busy.plot(t, [s.get("device_busy_pct", 0) for s in series], color="tab:red", label="device busy %", marker=".")
    busy.set_ylim(0, 100)
    busy.set_ylabel("busy %")
    axes[2].set_ylabel("IOs/s")
    axes[2].set_xlabel("seconds into the run")
    shaded = False
    for ti, s in zip(t, series, strict=True):
        if s.get("class") == "io":
            for ax in axes:
                ax.axvspan(ti - 1, ti, color="tab:orange", alpha=0.2, label="IO-bound second" if not shaded else None)
            shaded = True
    for ax in axes:
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    busy.legend(fontsize=7, loc="upper right")
    fig.suptitle(
        f"{doc['cell_id']} r{doc['repeat']}: {(doc.get('samples') or {}).get('bound', '?')}-bound", fontsize=10
    )
    return _svg(fig)


def forest_chart(group: answer.GroupResult) -> str | None:
    """Each configuration's ratio to the baseline's median with its interval (a log scale when they
    span more than 4x): a line
    at 1 (the baseline), the fastest in green, the tied in olive, the clearly worse in grey, an UNSAFE
    one in red. None when no configuration but the baseline has a ratio."""
    shown = [(c, c.to_baseline) for c in group.configurations if c.to_baseline is not None]
    if not any(c.name != group.baseline for c, _ in shown):
        return None
    fig = Figure(figsize=(7.0, 0.45 * len(shown) + 1.3))
    ax = fig.add_subplot()
    labels = []
    for y, (c, r) in enumerate(reversed(shown)):
        if c.unsafe:
            colour = "tab:red"
        elif c.name == group.fastest:
            colour = "tab:green"
        elif c.name in group.tied:
            colour = "tab:olive"
        else:
            colour = "tab:gray"
        ax.errorbar(
            [r.value], [y], xerr=[[r.value - r.ci_low], [r.ci_high - r.value]], fmt="o", color=colour, capsize=4
        )
        tags = [t for t, on in (("baseline", c.name == group.baseline), ("UNSAFE", c.unsafe)) if on]
        labels.append(c.name + (f" ({', '.join(tags)})" if tags else ""))
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_yticks(range(len(shown)), labels)
    ends = [e for _, r in shown for e in (r.ci_low, r.ci_high) if e > 0]
    if ends and max(ends) / min(ends) > 4:  # ratios far apart: a log scale keeps 0.5x and 2x alike
        ax.set_xscale("log")
    ax.set_xlabel(f"{group.metric_words}: × {group.baseline}'s median ({group.direction} is better)", fontsize=9)
    ax.set_title(group.label, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)


def _answer_html(found: answer.Answer) -> list[str]:
    """The answer section and the forest plots: what the page opens with."""

    def text(sentence: str) -> str:
        return html.escape(sentence).replace("UNSAFE", '<span class="unsafe">UNSAFE</span>')

    parts = [
        '<section class="answer" id="answer">',
        "<h2>The answer</h2>",
        f"<p>{html.escape(answer.intro(found))}</p>",
    ]
    if not found.groups:
        parts.append("<p>No results to answer from.</p>")
    for g in found.groups:
        heading = g.label if g.metric is None else f"{g.label}: {g.metric_words} ({g.direction} is better)"
        parts += [f"<h3>{html.escape(heading)}</h3>", f'<p class="headline"><strong>{text(g.headline)}</strong></p>']
        if g.details:
            parts.append("<ul>" + "".join(f"<li>{text(s)}</li>" for s in g.details) + "</ul>")
    parts.append("</section>")
    charts = [(g, forest_chart(g)) for g in found.groups if g.metric is not None]
    charts = [(g, svg) for g, svg in charts if svg]
    if charts:
        parts += ['<section class="forest" id="forest">', "<h2>Ratio to the baseline</h2>"]
        for g, svg in charts:
            caption = (
                f"{g.label}: {g.metric_words} of each configuration over {g.baseline}'s, median ratio and "
                f"{found.confidence:.0%} bootstrap interval"
            )
            parts.append(f'<figure class="chart forest">{svg}<figcaption>{html.escape(caption)}</figcaption></figure>')
        parts.append("</section>")
    return parts


# ----------------------------------------------------------------------------------- html


def _grid_table(
    columns: list[str],
    rows: list[tuple[str, dict[str, list[float] | str]]],
    direction: str,
    regimes: dict[tuple[str, str], str],
) -> str:
    out = ["<table><tr><th>input</th>", *(f"<th>{html.escape(c)}</th>" for c in columns), "</tr>"]
    for row, entries in rows:
        ranked = report.rank(entries, direction)
        out.append(f"<tr><td>{html.escape(row)}</td>")
        for col in columns:
            if col not in ranked:
                out.append(f"<td>{html.escape(str(entries.get(col, '')))}</td>")
                continue
            r = ranked[col]
            notes = [] if r.ratio == 1.0 else [f"{r.ratio:.2f}× the best"]
            notes += ["tied"] if r.mark == "tied" else []
            text = f"{report._fmt(r.median)}{r.spread}" + (f" ({', '.join(notes)})" if notes else "")
            tag = regimes.get((row, col), "")
            text += f" [{tag}]" if tag else ""
            css = {"best": ' class="best"', "tied": ' class="tied"'}.get(r.mark, "")
            out.append(f"<td{css}>{html.escape(text)}</td>")
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def _plain_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def html_report(
    docs: list[dict[str, Any]],
    title: str,
    found: answer.Answer | None = None,
    matrix_json: dict[str, Any] | None = None,
) -> str:
    """The whole page: the answer (``found``, or built here from the documents and ``matrix_json``),
    the forest plots, then the details collapsed."""
    if found is None:
        found = answer.build(docs, matrix_json)
    docs = compare.with_environment_axes(docs)  # an image axis: side by side in the tables
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>fsmatrix report: {html.escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>fsmatrix report: {html.escape(title)}</h1>",
    ]
    parts += _answer_html(found)
    parts.append('<details class="details"><summary>Details: environment, tables, charts and runs</summary>')
    parts += _environment(docs)
    legend_shown = False
    by_cell: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for doc in docs:
        by_cell[doc["cell_id"]].append(doc)
    for kind, tables in report.metric_tables(by_cell).items():
        cells = {cid: ds for cid, ds in by_cell.items() if ds[0]["workload"] == kind}
        if not cells:
            continue
        parts.append(f"<h2>{html.escape(kind)}</h2>")
        if kind in workloads.WORKLOADS and workloads.get(kind).note:
            parts.append(f"<p>{html.escape(workloads.get(kind).note)}</p>")
        found_classes = hardware.classes([d for ds in cells.values() for d in ds])
        if len(found_classes) > 1:
            parts.append(f'<p class="legend">{html.escape(hardware.why(found_classes))}</p>')
        for heading, group in report.workload_groups(kind, cells):
            if heading:
                parts.append(f"<h3>{html.escape(heading)}</h3>")
            for otitle, header, rows_ in report.overview_tables(kind, group):
                parts += [f"<h4>{html.escape(otitle)}</h4>", _plain_table(header, rows_)]
            keys = {m for ds in group.values() for d in ds for m in d.get("key_metrics", {})}
            for metric, mtitle, direction in tables:
                if metric not in keys:
                    continue
                columns, rows = report.metric_grid(kind, group, metric)
                if not columns:
                    continue
                better = "lower" if direction == "lower" else "higher"
                if not legend_shown:  # once per page
                    legend = report.TABLE_LEGEND.replace("**bold**", "bold")
                    parts.append(f'<p class="legend">How to read the tables: {html.escape(legend)}.</p>')
                    legend_shown = True
                note = f"{better} is better; {report.repeats_note(rows)}"
                parts.append(f"<h4>{html.escape(mtitle)} ({html.escape(note)})</h4>")
                parts.append(_grid_table(columns, rows, direction, report.regime_grid(kind, group)))
                parts.append(_figure(bar_chart(columns, rows, mtitle), f"{mtitle}: median, whiskers min..max"))
        for rtitle, header, rows_ in [
            *report.environment_axis_tables(kind, cells),
            *report.relative_speed_tables(kind, cells),
        ]:
            parts += [f"<h4>{html.escape(rtitle)}</h4>", _plain_table(header, rows_)]
    parts += seedreport.html_parts(docs)  # a seed matrix's results beside the seed's published tables
    parts.append("<h2>Per-run time series</h2>")
    parts.append(
        "<p>Per second: device throughput, CPU use and IO rate with device utilisation. Shaded seconds are the ones "
        "the sampler classed as IO-bound.</p>"
    )
    for cid, ds in sorted(by_cell.items()):
        shown = [d for d in sorted(ds, key=lambda d: d["repeat"]) if d.get("status") == "passed"]
        for doc in shown[:MAX_SERIES_RUNS_PER_CELL]:
            svg = series_chart(doc)
            if svg:
                parts.append(_figure(svg, f"{cid} repeat {doc['repeat']}"))
            else:
                parts.append(
                    f"<p>{html.escape(cid)} repeat {doc['repeat']}: no per-second samples (shorter than 1 s).</p>"
                )
    parts += crashtable.html_section(docs)
    parts.append("<h2>Runs and verification</h2>")
    status_rows = []
    for cid, ds in sorted(by_cell.items()):
        statuses = ", ".join(f"{s}×{[d['status'] for d in ds].count(s)}" for s in sorted({d["status"] for d in ds}))
        reasons = "; ".join(sorted({str(d.get("reason")) for d in ds if d.get("reason")}))
        ver = (ds[0].get("verification") or {}).get("status", "-")
        status_rows.append([cid, str(len(ds)), statuses, ver, reasons])
    parts.append(_plain_table(["cell", "runs", "status", "verification", "reason"], status_rows))
    parts.append("</details>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _environment(docs: list[dict[str, Any]]) -> list[str]:
    envs = report.environments(docs)
    items = "".join(f"<li>{html.escape(k)}: {html.escape(', '.join(sorted(v)))}</li>" for k, v in envs.items())
    out = ["<h2>Environment</h2>", f"<ul>{items}</ul>"]
    mixed = report.mixed_environments(docs)
    if mixed:
        out.append(
            f'<p class="warn">These results come from different environments ({html.escape(", ".join(mixed))}); '
            "numbers across them are not comparable.</p>"
        )
    return out


def write_html(docs: list[dict[str, Any]], title: str, out_dir: Path, found: answer.Answer | None = None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "report.html"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(html_report(docs, title, found), encoding="utf-8")
    tmp.replace(path)
    return path


# ----------------------------------------------------------------------------------- csv


def runs_csv(docs: list[dict[str, Any]]) -> str:
    """One row per run: identity, status, the cell's parameters (flattened) and every metric."""
    fixed = ["run_id", "cell_id", "repeat", "status", "workload", "started_at", "duration_s", "git_sha"]
    param_keys: list[str] = []
    metric_keys: list[str] = []
    for doc in docs:
        for key in flatten(doc.get("params") or {}):
            if key not in param_keys:
                param_keys.append(key)
        for key in doc.get("metrics") or {}:
            if key not in metric_keys:
                metric_keys.append(key)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(fixed + [f"param.{k}" for k in param_keys] + metric_keys)
    for doc in sorted(docs, key=lambda d: (str(d.get("run_id")), d["cell_id"], d["repeat"])):
        flat = flatten(doc.get("params") or {})
        sha = ((doc.get("provenance") or {}).get("git") or {}).get("sha", "")
        row = [doc.get("run_id", ""), doc["cell_id"], doc["repeat"], doc["status"], doc.get("workload", "")]
        row += [doc.get("started_at", ""), doc.get("duration_s", ""), sha]
        row += [flat.get(k, "") for k in param_keys]
        row += [(doc.get("metrics") or {}).get(k, "") for k in metric_keys]
        writer.writerow(row)
    return buf.getvalue()


def otava_csv(docs: list[dict[str, Any]]) -> str:
    """Apache Otava's CSV input: one row per run id (a point in history, by its start time), a ``time``
    column, ``commit`` and ``run_id`` attributes, and one column per cell and key metric
    (``<cell id>.<metric>``) holding the median of that run's passed repeats."""
    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for doc in docs:
        by_run[str(doc.get("run_id", ""))].append(doc)
    columns: list[str] = []
    points = []
    for run_id, run_docs in by_run.items():
        started = min(str(d.get("started_at") or "") for d in run_docs)
        sha = next((((d.get("provenance") or {}).get("git") or {}).get("sha") for d in run_docs), None) or ""
        values: dict[str, list[float]] = defaultdict(list)
        for doc in run_docs:
            if doc.get("status") != "passed":
                continue
            for metric in doc.get("key_metrics") or {}:
                value = (doc.get("metrics") or {}).get(metric)
                if isinstance(value, int | float):
                    values[f"{doc['cell_id']}.{metric}"].append(float(value))
        for name in values:
            if name not in columns:
                columns.append(name)
        points.append((started, sha, run_id, {k: statistics.median(v) for k, v in values.items()}))
    points.sort(key=lambda p: p[0])
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["time", "commit", "run_id", *sorted(columns)])
    for started, sha, run_id, medians in points:
        writer.writerow([_otava_time(started), sha, run_id, *(medians.get(c, "") for c in sorted(columns))])
    return buf.getvalue()


def otava_config(docs: list[dict[str, Any]], csv_file: str, test: str = "fsmatrix") -> str:
    """An Otava configuration (``tests:`` section) reading what otava_csv wrote to ``csv_file``, every
    metric with its direction (Otava: 1 when higher is better, -1 when lower is better)."""
    directions: dict[str, str] = {}
    for doc in docs:
        for metric, direction in (doc.get("key_metrics") or {}).items():
            directions.setdefault(f"{doc['cell_id']}.{metric}", direction)
    metrics = {name: {"direction": 1 if d == "higher" else -1} for name, d in sorted(directions.items())}
    config = {
        "tests": {
            test: {
                "type": "csv",
                "file": csv_file,
                "time_column": "time",
                "attributes": ["commit", "run_id"],
                "metrics": metrics,
                "csv_options": {"delimiter": ",", "quote_char": '"'},
            }
        }
    }
    return str(yaml.safe_dump(config, sort_keys=False))


def _otava_time(iso: str) -> str:
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S %z")
    except ValueError:
        return iso
