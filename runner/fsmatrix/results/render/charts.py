"""Charts for the HTML page: matplotlib figures as inline SVG (text drawn as paths, so no fonts are
fetched; hash-salted ids fixed, so the output is reproducible)."""

from __future__ import annotations

import html
import io

import matplotlib
from matplotlib.figure import Figure

from fsmatrix.results.store import Result
from fsmatrix.results.verdict import answer, stats

matplotlib.rcParams["svg.fonttype"] = "path"  # text as outlines: nothing to fetch, same look everywhere
matplotlib.rcParams["svg.hashsalt"] = "fsmatrix"  # stable element ids, reproducible output

MAX_SERIES_RUNS_PER_CELL = 3  # time-series charts per cell: enough to see run-to-run differences


def svg_of(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: inline SVG needs neither


def figure(svg: str, caption: str) -> str:
    return f'<figure class="chart">{svg}<figcaption>{html.escape(caption)}</figcaption></figure>'


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
                med = stats.median(values)
                xs.append(i + (j - (len(columns) - 1) / 2) * width)
                heights.append(med)
                low.append(med - min(values))
                high.append(max(values) - med)
        ax.bar(xs, heights, width * 0.95, yerr=[low, high], capsize=3, label=col)
    ax.set_xticks(range(len(rows)), [row for row, _ in rows])
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return svg_of(fig)


def series_chart(doc: Result) -> str | None:
    """Throughput, CPU and IO of one run, second by second; IO-bound seconds shaded."""
    series = doc.samples.series
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
    fig.suptitle(f"{doc.cell_id} r{doc.repeat}: {doc.samples.bound or '?'}-bound", fontsize=10)
    return svg_of(fig)


def forest_chart(group: answer.SpeedGroup) -> str | None:
    """Each configuration's ratio to the baseline (of geometric means) with its interval (a log scale
    when they span more than 4x): a line at 1 (the baseline), the best in green, the equivalent in
    blue, the not separated in olive, the worse in grey, an UNSAFE one in red. None when no
    configuration but the baseline has a ratio."""
    shown = [(c, c.to_baseline) for c in group.configurations if c.to_baseline is not None]
    base = group.group.baseline_name
    if not any(c.name != base for c, _ in shown):
        return None
    fig = Figure(figsize=(7.0, 0.45 * len(shown) + 1.3))
    ax = fig.add_subplot()
    labels = []
    for y, (c, r) in enumerate(reversed(shown)):
        if c.unsafe:
            colour = "tab:red"
        elif c.name == group.best:
            colour = "tab:green"
        elif c.name in group.equivalent:
            colour = "tab:blue"
        elif c.name in group.not_separated:
            colour = "tab:olive"
        else:
            colour = "tab:gray"
        ax.errorbar(
            [r.ratio], [y], xerr=[[r.ratio - r.ci_low], [r.ci_high - r.ratio]], fmt="o", color=colour, capsize=4
        )
        tags = [t for t, on in (("baseline", c.name == base), ("UNSAFE", c.unsafe)) if on]
        labels.append(c.name + (f" ({', '.join(tags)})" if tags else ""))
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_yticks(range(len(shown)), labels)
    ends = [e for _, r in shown for e in (r.ci_low, r.ci_high) if e > 0]
    if ends and max(ends) / min(ends) > 4:  # ratios far apart: a log scale keeps 0.5x and 2x alike
        ax.set_xscale("log")
    ax.set_xlabel(f"{group.metric_words}: × {base}'s (geometric mean; {group.direction} is better)", fontsize=9)
    ax.set_title(group.label, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return svg_of(fig)
