"""Trend pages (``fsmatrix history --html DIR``): one self-contained HTML page per comparison group,
each cell's metric over time per hardware class, change points marked and labelled with what changed;
an ``index.html`` lists the pages. Self-contained as the report page is (render/page.py): inline
styles, matplotlib figures as inline SVG with text as paths, a Content-Security-Policy that refuses
every fetch."""

from __future__ import annotations

import hashlib
import html
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from fsmatrix.results.render.charts import figure, svg_of
from fsmatrix.results.render.history import changed_text, metric_words, ratio_text
from fsmatrix.results.render.page import CSP, STYLE
from fsmatrix.results.verdict.history import History

LABEL_CHARS = 60  # a change point's label on the chart; the table under it says everything


def trend_chart(h: History) -> str:
    """One series over time: its points by run order, each change point a vertical line labelled
    with its ratio and what changed, the medians between change points drawn as steps."""
    s = h.series
    fig = Figure(figsize=(9.0, 3.2))
    ax = fig.add_subplot()
    xs = list(range(len(s.points)))
    ax.plot(xs, s.values, "o", markersize=3, color="#36c", label=s.metric)
    for start, stop, level in h.levels:
        ax.hlines(level, start - 0.5, stop - 0.5, colors="#888", linewidth=1)
    top = max(s.values) if s.values else 1.0
    for cp in h.change_points:
        ax.axvline(cp.index - 0.5, color="#c33", linewidth=1.2)
        label = f"×{cp.ratio:.2f} {changed_text(cp)}"
        if len(label) > LABEL_CHARS:
            label = label[: LABEL_CHARS - 1] + "…"
        ax.text(cp.index - 0.4, top, label, fontsize=7, color="#c33", va="top", rotation=90)
    ax.set_xlabel(f"run (oldest first; {s.points[0].time[:10]} … {s.points[-1].time[:10]})", fontsize=8)
    ax.set_ylabel(f"{s.metric} ({s.direction} is better)", fontsize=8)
    ax.set_title(f"{s.cell_id} — {s.hardware_class}", fontsize=9)
    ax.grid(alpha=0.3)
    return svg_of(fig)


def _table(h: History) -> str:
    if not h.change_points:
        return "<p>No change point.</p>"
    rows = [
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (cp.time, f"{cp.before_run} → {cp.after_run}", ratio_text(cp), f"{cp.p:.2g}", changed_text(cp))
        )
        + "</tr>"
        + (f'<tr><td colspan="5">bisect: <code>{html.escape(cp.bisect)}</code></td></tr>' if cp.bisect else "")
        for cp in h.change_points
    ]
    header = "".join(f"<th>{c}</th>" for c in ("at", "runs before → after", "ratio", "p", "what changed"))
    return f'<table class="changes"><tr>{header}</tr>{"".join(rows)}</table>'


def group_page(title: str, label: str, histories: Sequence[History]) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>{html.escape(label)} — {html.escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(label)}</h1>",
        f'<p><a href="index.html">{html.escape(title)}</a></p>',
    ]
    for h in histories:
        s = h.series
        caption = (
            f"{s.cell_id}, {s.metric} ({metric_words(s.kind, s.direction)}), {s.hardware_class}: "
            f"{len(s.points)} runs, {len(h.change_points)} change points"
        )
        parts += [f"<h2>{html.escape(s.cell_id)} · {html.escape(s.metric)}</h2>", figure(trend_chart(h), caption)]
        parts.append(_table(h))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _file_name(label: str, key: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:40] or "group"
    return f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:8]}.html"


def write_pages(histories: Sequence[History], out_dir: Path, *, title: str) -> Path:
    """The pages, one per comparison group, and ``index.html`` listing them; the index's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple[str, str], list[History]] = defaultdict(list)
    for h in histories:
        groups[(h.series.group, h.series.group_label)].append(h)
    links = []
    for (key, label), members in sorted(groups.items(), key=lambda item: item[0][1]):
        name = _file_name(label, key)
        _write(out_dir / name, group_page(title, label, members))
        found = sum(len(h.change_points) for h in members)
        links.append(
            f'<li><a href="{name}">{html.escape(label)}</a>: {len(members)} series, {found} change points</li>'
        )
    index = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<ul>{''.join(links)}</ul>" if links else "<p>No series in the store for this selection.</p>",
        "</body></html>",
    ]
    path = out_dir / "index.html"
    _write(path, "\n".join(index) + "\n")
    return path


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
