"""The report's tables, shaped like the seed documents': for each workload, rows are its input (its
declaration's row keys: the 3n+1 range, the fio pattern, ...) and columns the storage stack; one
table per key metric (the declaration's titles), each value the median over repeats with its spread
and the runs' regime (CPU- or IO-bound), marked with the answer's words over its row
(``groups.rank``): bold when best, else "worse", "equivalent" or "not separated", with "n×" the
leading median. Cells that differ in any other setting go in separate tables, headed by what differs.

An environment axis of the cells (``environment.ENV_AXES``: the guest image) is part of the columns:
a matrix that crosses images shows each storage stack on each image side by side ("ext4 ·
debian13"), followed by a table of each image's ratio to the first one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from fsmatrix.agent import workloads
from fsmatrix.agent.work import WORK_METRICS
from fsmatrix.matrix import flatten
from fsmatrix.results.store import Result
from fsmatrix.results.verdict import environment, groups, hardware, stats, work
from fsmatrix.results.verdict.answer import Answer, SpeedGroup
from fsmatrix.results.verdict.groups import Ranked, rank
from fsmatrix.results.verdict.metrics import metric_value, regime

# Per workload, from its declaration: which metrics get a table (name, title, direction), and the
# parameters that name a row. A workload the registry does not know (an old result) still gets a
# section, with a table per key metric its documents name.
METRIC_TABLES: dict[str, list[tuple[str, str, str]]] = {
    w.name: [(m.name, m.title, m.better) for m in sorted(w.metrics, key=lambda m: m.name != w.primary)]
    for w in workloads.all_workloads()
}


ROW_KEYS: dict[str, tuple[str, ...]] = {
    w.name: tuple(f"workload.{w.name}.{k}" for k in w.row_keys) for w in workloads.all_workloads()
}


# Columns: the storage stack a DBA chooses between (filesystem, its options, layout, device profile).
COLUMN_KEYS = (
    "filesystem",
    "mount_options",
    "mkfs_options",
    "storage.layout",
    "storage.stripe_disks",
    "storage.stripe_size",
    "device.profile",
    *environment.ENV_AXES,
)


AXIS_SEPARATOR = " · "  # between a column's storage stack and its environment axis values


HARDWARE = "hardware class"  # a table's heading names the class its runs ran on (hardware.py)


def _row_label(kind: str, flat: dict[str, Any]) -> str:
    if kind not in workloads.WORKLOADS:
        return ""
    workload = workloads.get(kind)
    return workload.label({k: flat[f"workload.{kind}.{k}"] for k in workload.row_keys})


# The work per operation (agent/work.py's WORK_METRICS), tabled after each workload's own metrics
# wherever its runs measured it: the low-noise companions of time, side by side with it.
WORK_TABLES = [(m.name, m.title, m.better) for m in WORK_METRICS]
WORK_NAMES = frozenset(m.name for m in WORK_METRICS)


def metric_tables(by_cell: dict[str, list[Result]]) -> dict[str, list[tuple[str, str, str]]]:
    """The tables of every workload these results hold: registered ones in registry order, then others;
    each followed by the work tables."""
    kinds = dict.fromkeys(ds[0].workload for ds in by_cell.values())
    tables = {k: v for k, v in METRIC_TABLES.items() if k in kinds}
    for kind in kinds:
        if kind not in tables:
            keys = {m: d for ds in by_cell.values() if ds[0].workload == kind for m, d in ds[0].key_metrics.items()}
            tables[kind] = [(m, m, d) for m, d in keys.items()]
    return {kind: [*listed, *(t for t in WORK_TABLES if t not in listed)] for kind, listed in tables.items()}


def tabled(group: dict[str, list[Result]], metric: str) -> bool:
    """Whether ``metric`` gets a table for these cells: a key metric of theirs, or a work metric some
    passed run of theirs measured above 0 (a table of zeros says nothing)."""
    docs = [d for ds in group.values() for d in ds]
    if any(metric in d.key_metrics for d in docs):
        return True
    return metric in WORK_NAMES and any(
        d.status == "passed" and (v := metric_value(d, metric)) is not None and v > 0 for d in docs
    )


def _column_label(flat: dict[str, Any]) -> str:
    """The storage stack, then the environment axis values a cell names ("ext4 · debian13")."""
    axes = [str(flat[axis]) for axis in environment.ENV_AXES if axis in flat]
    return AXIS_SEPARATOR.join([_storage_label(flat), *axes])


def _storage_label(flat: dict[str, Any]) -> str:
    extra = [f"{k}={flat[k]}" for k in ("mkfs_options", "mount_options") if flat.get(k)]
    layout = flat.get("storage.layout", "single")
    if layout in ("md-raid0", "lvm-stripe"):
        extra.append(f"{layout} {flat.get('storage.stripe_disks')}×{flat.get('storage.stripe_size')}")
    elif layout != "single":
        extra.append(str(layout))
    if flat.get("device.profile", "native") != "native":
        extra.append(f"{flat['device.profile']} profile")
    return f"{flat['filesystem']} ({', '.join(extra)})" if extra else str(flat["filesystem"])


def number(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.1f}"


def _cell_text(ranked: Ranked, regime: str) -> str:
    tag = f" [{regime}]" if regime else ""
    if ranked.mark == "best":
        return f"**{number(ranked.median)}**{ranked.spread}{tag}"
    # no "n×" against a best of 0 (a stack doing none of some work): no ratio, as the answer gives none
    notes = [] if ranked.ratio == 1.0 or not math.isfinite(ranked.ratio) else [f"{ranked.ratio:.2f}×"]
    notes += [ranked.mark] if ranked.mark else []
    text = f"{number(ranked.median)}{ranked.spread}"
    return text + (f" ({', '.join(notes)})" if notes else "") + tag


def _values(entries: dict[str, list[float] | str]) -> dict[str, list[float]]:
    return {c: v for c, v in entries.items() if isinstance(v, list)}


def repeats_note(rows: list[tuple[str, dict[str, list[float] | str]]]) -> str:
    """ "3 repeats" or "3-5 repeats": how many passed runs each entry's median comes from."""
    counts = sorted({len(v) for _, entries in rows for v in entries.values() if isinstance(v, list)})
    if not counts:
        return "no passed runs"
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"{n} repeat{'s' if n != '1' else ''} per entry"


# Printed once per report, before the first table (each table names its repeats in its title).
TABLE_LEGEND = (
    "median ±half-range of the repeats; n×: times the row's best median; the answer's words over the row's "
    "entries (Welch's intervals on logs that hold together at 95 %): **bold**: best, every other entry worse "
    "or equivalent; worse: separated from the leader (the best geometric mean); equivalent: shown within ±5 % "
    "of it; not separated: neither; a work metric's rows (per operation) in the work answer's words, read "
    "with its margin: more work (wholly beyond it), shown, size unsettled, equivalent, not separated, and "
    "**bold** the least when no other is not separated from it, and each stack doing none of that work (no "
    "ratio against none); "
    "[cpu] / [io] / [mixed]: the runs' regime from the sampler"
)


def workload_groups(kind: str, cells: dict[str, list[Result]]) -> list[tuple[str, dict[str, list[Result]]]]:
    """Cells of one workload split into groups that differ only in row and column keys, each with a
    heading naming what sets it apart from the other groups ("" when there is one group). Runs from
    different hardware classes (hardware.py) are never in one group: its heading names the class."""
    groups: dict[tuple[tuple[str, str], ...], dict[str, list[Result]]] = defaultdict(dict)
    for klass, members in hardware.split(cells).items():
        for cid, ds in members.items():
            flat = flatten(ds[0].params)
            keys = ROW_KEYS.get(kind, ()) + COLUMN_KEYS
            rest = tuple(sorted((k, str(v)) for k, v in flat.items() if k not in keys))
            groups[((HARDWARE, klass), *rest)][cid] = ds
    varying = {k for k, _ in set().union(*groups)} if len(groups) > 1 else set()
    varying = {k for k in varying if len({dict(g).get(k) for g in groups}) > 1}
    return [(", ".join(f"{k}={v}" for k, v in rest if k in varying), group) for rest, group in groups.items()]


def environment_axis_tables(kind: str, cells: dict[str, list[Result]]) -> list[tuple[str, list[str], list[list[str]]]]:
    """Per environment axis that varies among the cells (documents from ``with_environment_axes``):
    each storage stack's primary-metric median on each value, and each value's ratio to the first
    one: the ratio of geometric means with its Welch interval and the answer's word for the pair
    (``groups.compare_group`` on the two alone: a family of one pair)."""
    metric, title, direction = metric_tables(cells)[kind][0]
    docs = [d for ds in cells.values() for d in ds]
    out = []
    for axis in environment.varying_axes(docs):
        values = environment.axis_values(docs, axis)
        first = values[0]
        samples: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(dict)
        for heading, group in workload_groups(kind, cells):
            for ds in group.values():
                flat = flatten(ds[0].params)
                row = _row_label(kind, flat) + (f" ({heading})" if heading else "")
                passed = [float(x) for d in ds if d.status == "passed" and (x := d.metrics.get(metric)) is not None]
                samples[(row, _storage_label(flat))][environment.axis_value(ds[0], axis)] = passed
        header = ["input", "storage", *values, *(f"{v} / {first}" for v in values[1:])]
        rows = []
        for (row, stack), by_value in samples.items():
            medians = [number(stats.median(by_value[v])) if by_value.get(v) else "-" for v in values]
            ratios = []
            for v in values[1:]:
                if not by_value.get(first) or not by_value.get(v):
                    ratios.append("-")
                    continue
                pair = groups.compare_group({first: by_value[first], v: by_value[v]}, direction, baseline=first)
                r = pair.standing(v).to_baseline
                if r is None:
                    ratios.append("not enough data")
                    continue
                words = {"best": "better", "worse": "worse"}.get(pair.standing(v).status, pair.standing(v).status)
                ratios.append(f"{r.ratio:.2f}× [{r.ci_low:.2f}, {r.ci_high:.2f}], {words}")
            rows.append([row, stack, *medians, *ratios])
        if rows:
            note = f"{direction} is better; ratio of geometric means [95 % interval, Welch's on logs], answer's words"
            out.append((f"{title} by {axis} ({note})", header, rows))
    return out


Grid = tuple[list[str], list[tuple[str, dict[str, list[float] | str]]]]


def metric_grid(kind: str, group: dict[str, list[Result]], metric: str) -> Grid:
    """Columns (filesystems) and rows (inputs) of one metric; each entry the passed runs' values, or
    the status text when none passed. Empty when no entry has a value."""
    rows: dict[str, dict[str, list[float] | str]] = defaultdict(dict)
    columns: list[str] = []
    for ds in group.values():
        flat = flatten(ds[0].params)
        row, col = _row_label(kind, flat), _column_label(flat)
        if col not in columns:
            columns.append(col)
        values = [float(x) for d in ds if d.status == "passed" and (x := d.metrics.get(metric)) is not None]
        rows[row][col] = values if values else sorted({d.status for d in ds})[0]
    if not any(isinstance(v, list) for r in rows.values() for v in r.values()):
        return [], []
    # Each storage stack's environment values side by side: the stacks in the order they came, the
    # values of an axis (the images) with its default first.
    stacks = list(dict.fromkeys(c.split(AXIS_SEPARATOR)[0] for c in columns))
    docs = [d for ds in group.values() for d in ds]
    order = [environment.axis_values(docs, axis) for axis in environment.ENV_AXES]

    def place(column: str) -> tuple[int, list[int]]:
        stack, *values = column.split(AXIS_SEPARATOR)
        return stacks.index(stack), [order[i].index(v) if v in order[i] else 0 for i, v in enumerate(values)]

    columns.sort(key=place)
    return columns, list(rows.items())


def regime_grid(kind: str, group: dict[str, list[Result]]) -> dict[tuple[str, str], str]:
    """(row, column) → the regime of that cell's runs, for the same rows and columns as metric_grid."""
    out = {}
    for ds in group.values():
        flat = flatten(ds[0].params)
        out[(_row_label(kind, flat), _column_label(flat))] = regime(ds)
    return out


def ranks(
    kind: str, group: dict[str, list[Result]], metric: str, direction: str, *, alpha: float, work_delta: float
) -> dict[str, dict[str, Ranked]]:
    """Each row of one metric's table (``metric_grid``) placed in the answer's words: time's rule
    (``groups.rank``), or for a work metric the work answer's (``work.rank``: at α over the row's work
    metrics compared, read with the margin ``work_delta``), so a table never calls "worse" a difference
    the answer calls equivalent."""
    _, rows = metric_grid(kind, group, metric)
    if metric not in WORK_NAMES:
        return {row: rank(entries, direction) for row, entries in rows}
    work_rows = [dict(metric_grid(kind, group, m.name)[1]) for m in WORK_METRICS]
    out = {}
    for row, entries in rows:
        compared = sum(work.comparable(_values(r.get(row, {}))) for r in work_rows)
        out[row] = work.rank(entries, level=alpha / max(compared, 1), delta=work_delta)
    return out


def work_margin(found: Answer) -> float:
    """The margin δ of the work answer's words (``--work-delta``, else the answer's δ)."""
    return next((g.work.delta for g in found.groups if isinstance(g, SpeedGroup) and g.work), found.delta)


def metric_table(
    kind: str, group: dict[str, list[Result]], metric: str, direction: str, *, alpha: float, work_delta: float
) -> list[str]:
    columns, rows = metric_grid(kind, group, metric)
    if not columns:
        return []
    regimes = regime_grid(kind, group)
    placed = ranks(kind, group, metric, direction, alpha=alpha, work_delta=work_delta)
    out = ["| " + " | ".join(["input", *columns]) + " |", "|" + "---|" * (len(columns) + 1)]
    for row, entries in rows:
        ranked = placed[row]
        texts = []
        for col in columns:
            value = entries.get(col, "")
            texts.append(_cell_text(ranked[col], regimes.get((row, col), "")) if col in ranked else str(value))
        out.append("| " + " | ".join([row, *texts]) + " |")
    return out


def overview_tables(kind: str, group: dict[str, list[Result]]) -> list[tuple[str, list[str], list[list[str]]]]:
    """One table per input of the metrics the workload declares as its ``overview``: the storage
    stacks as rows, the metrics as columns (medians of the passed repeats, ±half-range)."""
    if kind not in workloads.WORKLOADS or not workloads.get(kind).overview:
        return []
    declared = {m.name: m for m in workloads.get(kind).metrics}
    names = [n for n in workloads.get(kind).overview if n in declared]
    grids = {n: metric_grid(kind, group, n) for n in names}
    inputs = list(dict.fromkeys(row for _, rows in grids.values() for row, _ in rows))
    stacks = list(dict.fromkeys(col for columns, _ in grids.values() for col in columns))
    out = []
    for row in inputs:
        table = []
        for stack in stacks:
            texts = []
            for name in names:
                value = dict(grids[name][1]).get(row, {}).get(stack, "")
                if isinstance(value, list):
                    median = stats.median(value)
                    spread = max(value) - min(value)
                    texts.append(
                        number(median) + (f" ±{100 * spread / 2 / median:.0f}%" if len(value) > 1 and median else "")
                    )
                else:
                    texts.append(str(value))
            if any(texts):
                table.append([stack, *texts])
        if table:
            header = ["storage", *(f"{declared[n].title}" for n in names)]
            out.append((f"Overview ({row}), median of repeats", header, table))
    return out


def _order(value: Any) -> tuple[int, float, str]:
    if isinstance(value, bool | int | float):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def relative_speed_tables(kind: str, cells: dict[str, list[Result]]) -> list[tuple[str, list[str], list[list[str]]]]:
    """Seed 000's "relative speed" tables: cells that differ only in database settings (the settings
    blocks the workload owns, e.g. gtm.*), the first metric's median and each one's speed relative
    to the first (default-most) setting."""
    by_class = hardware.split(cells)
    if len(by_class) > 1:  # one table per hardware class: speeds from different machines are not relative
        return [
            (f"{title} on {klass}", header, rows)
            for klass, members in by_class.items()
            for title, header, rows in relative_speed_tables(kind, members)
        ]
    metric, title, direction = metric_tables(cells)[kind][0]
    blocks = {b.name for b in workloads.get(kind).settings} if kind in workloads.WORKLOADS else set()

    def database(key: str) -> bool:
        return key.partition(".")[0] in blocks

    families: dict[tuple[tuple[str, str], ...], list[tuple[dict[str, Any], list[float]]]] = defaultdict(list)
    for ds in cells.values():
        flat = flatten(ds[0].params)
        key = tuple(sorted((k, str(v)) for k, v in flat.items() if not database(k)))
        values = [float(x) for d in ds if d.status == "passed" and (x := d.metrics.get(metric)) is not None]
        if values:
            families[key].append((flat, values))
    out = []
    for members in families.values():
        if len(members) < 2:
            continue
        varying = sorted(k for k in members[0][0] if database(k) and len({str(f[k]) for f, _ in members}) > 1)
        members.sort(key=lambda m: tuple(_order(m[0][k]) for k in varying))  # False before True, low before high
        reference = stats.median(members[0][1])
        flat0 = members[0][0]
        header = ["filesystem", *(k.partition(".")[2] for k in varying), title, "relative speed"]
        rows = []
        for flat, values in members:
            med = stats.median(values)
            speed = (reference / med if direction == "lower" else med / reference) if med and reference else 0.0
            rows.append([str(flat["filesystem"]), *(str(flat[k]) for k in varying), number(med), f"{speed:.0%}"])
        label = f"{_column_label(flat0)}, input {_row_label(kind, flat0)}"
        out.append((f"Relative speed ({label})", header, rows))
    return out
