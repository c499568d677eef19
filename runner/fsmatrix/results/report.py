"""Markdown reports shaped like the seed documents' tables, opened by the answer (results/answer.py).

The report begins with "The answer" (what the runs decided, per comparison group), then the
environment, the tables' legend once (``TABLE_LEGEND``), and the tables.
For each workload, rows are its input (its declaration's row keys: the 3n+1 range, the fio
pattern, ...) and columns the filesystem; one table per key metric (the declaration's titles), each
value the median over repeats with its spread and the runs' regime (CPU- or IO-bound). A value is
bold only when the statistical test ``compare`` uses separates it from every other in its row;
values the test cannot tell from the best are marked "tied". The others show "n× worse" (how
many times worse than the best: for a time value/best, for a rate best/value; the test separates
them). Cells that differ in any other
setting go in separate tables, headed by what differs.

An environment axis of the cells (``compare.ENV_AXES``: the guest image) is part of the columns: a
matrix that crosses images shows each storage stack on each image side by side ("ext4 · debian13"),
followed by a table of each image's ratio to the first one (the answer's ratio of medians and its
interval, and whether the test separates them), and its environment section names the kernels each
image brought instead of warning about mixed environments.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix import results
from fsmatrix.agent import workloads
from fsmatrix.matrix import flatten
from fsmatrix.results import answer, compare, crashtable, decide, hardware, regime, seedreport, stats

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
    *compare.ENV_AXES,
)
AXIS_SEPARATOR = " · "  # between a column's storage stack and its environment axis values
# The environment a report names (kernel/CPU/memory of where the workload ran: the guest under a VM
# backend; host.*: the machine under it). Results that differ in any of these are flagged.
ENV_KEYS = (
    "backend",
    "accel",
    "kernel",
    "cpu_model",
    "memory_kib",
    "host.machine_id",
    "host.cpu_model",
    "host.kernel",
    "host.memory_kib",
)
HARDWARE = "hardware class"  # a table's heading names the class its runs ran on (hardware.py)


def _row_label(kind: str, flat: dict[str, Any]) -> str:
    if kind not in workloads.WORKLOADS:
        return ""
    workload = workloads.get(kind)
    return workload.label({k: flat[f"workload.{kind}.{k}"] for k in workload.row_keys})


def metric_tables(by_cell: dict[str, list[dict[str, Any]]]) -> dict[str, list[tuple[str, str, str]]]:
    """The tables of every workload these results hold: registered ones in registry order, then others."""
    kinds = dict.fromkeys(ds[0]["workload"] for ds in by_cell.values())
    tables = {k: v for k, v in METRIC_TABLES.items() if k in kinds}
    for kind in kinds:
        if kind not in tables:
            keys = {
                m: d for ds in by_cell.values() if ds[0]["workload"] == kind for m, d in ds[0]["key_metrics"].items()
            }
            tables[kind] = [(m, m, d) for m, d in keys.items()]
    return tables


def _column_label(flat: dict[str, Any]) -> str:
    """The storage stack, then the environment axis values a cell names ("ext4 · debian13")."""
    axes = [str(flat[axis]) for axis in compare.ENV_AXES if axis in flat]
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


def _fmt(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.1f}"


@dataclass(frozen=True)
class Ranked:
    """One entry of a report row, placed against the row's best median."""

    median: float
    spread: str  # " ±5%" (half the range, relative to the median), "" for one run
    ratio: float  # how many times worse than the best median (1.0 for the best)
    mark: str  # "best": separated from every other entry; "tied": not separated from the best; ""


def rank(entries: dict[str, list[float] | str], direction: str) -> dict[str, Ranked]:
    """The entries that have values, each placed against the best median. The best, and which entries
    are separated from it, are the answer's (decide.compare_group: Holm-adjusted across the entries'
    comparisons with the best); an entry it does not call worse is "tied" with the best, and so is
    the best then. With too few runs for any decision, the best median leads and everything ties."""
    values = {col: v for col, v in entries.items() if isinstance(v, list) and v}
    if not values:
        return {}
    medians = {col: statistics.median(v) for col, v in values.items()}
    pick = min if direction == "lower" else max
    answer = decide.compare_group(values, direction)
    leader = answer.best or pick(medians, key=lambda col: medians[col])
    best = medians[leader]
    tied = {col for col in values if col != leader and col not in answer.worse}
    out = {}
    for col, vals in values.items():
        med = medians[col]
        spread = f" ±{100 * (max(vals) - min(vals)) / 2 / med:.0f}%" if len(vals) > 1 and med else ""
        ratio = _times_worse(med, best, direction)
        if col == leader:
            mark = "tied" if tied else "best" if len(values) > 1 else ""
        else:
            mark = "tied" if col in tied else ""
        out[col] = Ranked(med, spread, 1.0 if col == leader else ratio, mark)
    return out


def _times_worse(value: float, best: float, direction: str) -> float:
    """How many times worse ``value`` is than ``best`` (1.0: as good; inf: the best is 0 s or this rate 0)."""
    worse, better = (value, best) if direction == "lower" else (best, value)
    if better == 0:
        return 1.0 if worse == 0 else float("inf")
    return worse / better


def _cell_text(ranked: Ranked, regime: str) -> str:
    tag = f" [{regime}]" if regime else ""
    if ranked.mark == "best":
        return f"**{_fmt(ranked.median)}**{ranked.spread}{tag}"
    # A value the test separates from the best says so ("worse"); one it cannot, "tied".
    worse = "" if ranked.mark == "tied" else " worse"
    notes = [] if ranked.ratio == 1.0 else [f"{ranked.ratio:.2f}×{worse}"]
    notes += ["tied"] if ranked.mark == "tied" else []
    text = f"{_fmt(ranked.median)}{ranked.spread}"
    return text + (f" ({', '.join(notes)})" if notes else "") + tag


def repeats_note(rows: list[tuple[str, dict[str, list[float] | str]]]) -> str:
    """ "3 repeats" or "3-5 repeats": how many passed runs each entry's median comes from."""
    counts = sorted({len(v) for _, entries in rows for v in entries.values() if isinstance(v, list)})
    if not counts:
        return "no passed runs"
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"{n} repeat{'s' if n != '1' else ''} per entry"


# Printed once per report, before the first table (each table names its repeats in its title).
TABLE_LEGEND = (
    "median ±half-range of the repeats; **bold**: better than every other entry by the test `compare` uses "
    "(Mann-Whitney U or Welch's t on logs, α = 0.05, and a bootstrap interval of the ratio excluding 1); "
    "tied: not distinguishable from the best; n× worse: times worse than the best median, and separated from it "
    "by that test (n×, tied: worse by that much, but not separated); "
    "[cpu] / [io] / [mixed]: the runs' regime from the sampler"
)


def markdown(
    docs: list[dict[str, Any]],
    title: str,
    found: answer.Answer | None = None,
    matrix_json: dict[str, Any] | None = None,
    race: dict[str, Any] | None = None,
) -> str:
    """The whole report for a set of result documents: the answer first (``found``, or built here
    from the documents and the run's ``matrix_json``), the race when the run raced (its
    race.json), then the environment and the tables."""
    if found is None:
        found = answer.build(docs, matrix_json)
    docs = compare.with_environment_axes(docs)
    lines = [f"# fsmatrix report: {title}", "", *answer.markdown_lines(found)]
    if race is not None:
        lines += race_section(race)
    lines += _environment_section(docs)
    by_cell: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for doc in docs:
        by_cell[doc["cell_id"]].append(doc)
    sections: list[str] = []
    tables_shown = 0
    for kind, tables in metric_tables(by_cell).items():
        cells = {cid: ds for cid, ds in by_cell.items() if ds[0]["workload"] == kind}
        if cells:
            section, shown = _workload_section(kind, tables, cells)
            sections += section
            tables_shown += shown
    if tables_shown:
        lines += [f"How to read the tables: {TABLE_LEGEND}.", ""]
    lines += sections
    lines += crashtable.markdown_section(docs)
    lines += seedreport.markdown(docs)  # a seed matrix's results beside the seed's published tables
    lines += _status_section(by_cell)
    return "\n".join(lines) + "\n"


def race_section(race: dict[str, Any]) -> list[str]:
    """ "Race": rounds, runs used against the fixed design's, and one row per cell: when it left, why."""
    rounds = len(race.get("rounds") or [])
    used, fixed = int(race.get("runs_used") or 0), int(race.get("runs_fixed") or 0)
    stopped = race.get("stopped") or {}
    settings = race.get("settings") or {}
    lines = [
        "## Race",
        "",
        f"{rounds} rounds ({settings.get('min_repeats')} to {settings.get('max_repeats')} repeats, minimum effect "
        f"{float(settings.get('delta') or 0):.0%}); "
        + (f"stopped: {stopped.get('why')}" if stopped else "not finished")
        + f". {used} runs of the fixed design's {fixed} ({fixed - used} saved). A retired cell was "
        "significantly worse than its group's best by more than the minimum effect; a tied one equivalent to "
        "it within that effect (docs/statistics-and-gate.md, 'Racing').",
        "",
        "| cell | left after round | why |",
        "|---|---|---|",
    ]
    left = race.get("left") or {}
    for cell_id in race.get("cells") or []:
        leaving = left.get(cell_id)
        if leaving:
            why = f"{leaving.get('action')}: {leaving.get('reason')}".replace("|", "\\|")
            lines.append(f"| {cell_id} | {leaving.get('round')} | {why} |")
        else:
            lines.append(f"| {cell_id} | - | still racing |")
    return [*lines, ""]


def explained_by_axes(docs: list[dict[str, Any]]) -> dict[str, dict[str, set[str]]]:
    """ENV_KEYS entry -> {axis value -> the entry's values}, for the entries that differ among these
    results only because an environment axis of their cells does (each image's own kernel)."""
    explained: dict[str, dict[str, set[str]]] = {}
    for axis in compare.varying_axes(docs):
        by_value: dict[str, list[dict[str, Any]]] = {value: [] for value in compare.axis_values(docs, axis)}
        for doc in docs:
            by_value[compare.axis_value(doc, axis)].append(doc)
        for key in ENV_KEYS:
            if key not in compare.ENV_AXES[axis]:
                continue
            per_value = {value: environments(group)[key] for value, group in by_value.items()}
            if all(len(values) == 1 for values in per_value.values()):
                explained[key] = per_value
    return explained


def mixed_environments(docs: list[dict[str, Any]]) -> list[str]:
    """The ENV_KEYS entries whose values differ among these results with no environment axis of
    their cells to explain it: numbers across them are not comparable."""
    explained = explained_by_axes(docs)
    return [k for k, v in environments(docs).items() if len(v) > 1 and k not in explained]


def environments(docs: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Each ENV_KEYS entry → the values the documents hold for it."""
    envs: dict[str, set[str]] = {k: set() for k in ENV_KEYS}
    for doc in docs:
        prov = doc.get("provenance") or {}
        for key in ENV_KEYS:
            envs[key].add(str(compare.provenance_value(prov, key)))
    return envs


def _environment_section(docs: list[dict[str, Any]]) -> list[str]:
    envs = environments(docs)
    shas = {str((doc.get("provenance") or {}).get("git", {}).get("sha", "unknown"))[:12] for doc in docs}
    # VM results: the agent's commit is the image's; the host side that drove the guest has its own.
    host_shas = {str(((doc.get("provenance") or {}).get("host") or {}).get("fsmatrix_git", ""))[:12] for doc in docs}
    host_shas.discard("")
    explained = explained_by_axes(docs)
    lines = ["## Environment", ""]
    for axis in compare.varying_axes(docs):
        named = ", ".join(compare.axis_values(docs, axis))
        lines.append(f"- {axis}: {named} (a setting of the cells: side by side in the tables)")
    for key, values in envs.items():
        if key in explained:
            per = ", ".join(f"{', '.join(sorted(v))} ({axis_value})" for axis_value, v in explained[key].items())
            lines.append(f"- {key}: {per}")
        else:
            lines.append(f"- {key}: {', '.join(sorted(values))}")
    if host_shas:
        lines.append(f"- fsmatrix commit: guest agent {', '.join(sorted(shas))}; host {', '.join(sorted(host_shas))}")
    else:
        lines.append(f"- fsmatrix commit: {', '.join(sorted(shas))}")
    mixed = mixed_environments(docs)
    if mixed:
        lines += [
            "",
            f"> **WARNING: these results come from different environments ({', '.join(mixed)}); "
            "numbers across them are not comparable.**",
        ]
    return [*lines, ""]


def workload_groups(
    kind: str, cells: dict[str, list[dict[str, Any]]]
) -> list[tuple[str, dict[str, list[dict[str, Any]]]]]:
    """Cells of one workload split into groups that differ only in row and column keys, each with a
    heading naming what sets it apart from the other groups ("" when there is one group). Runs from
    different hardware classes (hardware.py) are never in one group: its heading names the class."""
    groups: dict[tuple[tuple[str, str], ...], dict[str, list[dict[str, Any]]]] = defaultdict(dict)
    for klass, members in hardware.split(cells).items():
        for cid, ds in members.items():
            flat = flatten(ds[0]["params"])
            keys = ROW_KEYS.get(kind, ()) + COLUMN_KEYS
            rest = tuple(sorted((k, str(v)) for k, v in flat.items() if k not in keys))
            groups[((HARDWARE, klass), *rest)][cid] = ds
    varying = {k for k, _ in set().union(*groups)} if len(groups) > 1 else set()
    varying = {k for k in varying if len({dict(g).get(k) for g in groups}) > 1}
    return [(", ".join(f"{k}={v}" for k, v in rest if k in varying), group) for rest, group in groups.items()]


def _workload_section(
    kind: str, tables: list[tuple[str, str, str]], cells: dict[str, list[dict[str, Any]]]
) -> tuple[list[str], int]:
    """The workload's section, and how many metric tables (those the legend explains) it has."""
    lines = [f"## {kind}", ""]
    shown = 0
    if kind in workloads.WORKLOADS and workloads.get(kind).note:
        lines += [f"> {workloads.get(kind).note}", ""]
    found = hardware.classes([d for ds in cells.values() for d in ds])
    if len(found) > 1:
        lines += [f"> {hardware.why(found)}", ""]
    for heading, group in workload_groups(kind, cells):
        if heading:
            lines += [f"### {heading}", ""]
        for title, header, rows in overview_tables(kind, group):
            lines += [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(row) + " |" for row in rows]
            lines.append("")
        keys = {m for ds in group.values() for d in ds for m in d.get("key_metrics", {})}
        for metric, title, direction in tables:
            table = _metric_table(kind, group, metric, direction) if metric in keys else []
            if table:
                repeats = repeats_note(metric_grid(kind, group, metric)[1])
                lines += [f"**{title}** ({direction} is better; {repeats})", "", *table, ""]
                shown += 1
    for title, header, rows in [*environment_axis_tables(kind, cells), *relative_speed_tables(kind, cells)]:
        lines += [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    return lines, shown


def environment_axis_tables(
    kind: str, cells: dict[str, list[dict[str, Any]]]
) -> list[tuple[str, list[str], list[list[str]]]]:
    """Per environment axis that varies among the cells (documents from ``with_environment_axes``):
    each storage stack's primary-metric median on each value, and each value's ratio to the first
    one with its 95 % bootstrap interval: the answer's ratio of medians (``stats.compare_samples``,
    as the answer and ``compare`` compute it), and whether the test separates them ("no change":
    inside the noise)."""
    metric, title, direction = metric_tables(cells)[kind][0]
    docs = [d for ds in cells.values() for d in ds]
    out = []
    for axis in compare.varying_axes(docs):
        values = compare.axis_values(docs, axis)
        first = values[0]
        samples: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(dict)
        for heading, group in workload_groups(kind, cells):
            for ds in group.values():
                flat = flatten(ds[0]["params"])
                row = _row_label(kind, flat) + (f" ({heading})" if heading else "")
                passed = [float(d["metrics"][metric]) for d in ds if d["status"] == "passed" and metric in d["metrics"]]
                samples[(row, _storage_label(flat))][compare.axis_value(ds[0], axis)] = passed
        header = ["input", "storage", *values, *(f"{v} / {first}" for v in values[1:])]
        rows = []
        for (row, stack), by_value in samples.items():
            medians = [_fmt(stats.median(by_value[v])) if by_value.get(v) else "-" for v in values]
            ratios = []
            for v in values[1:]:
                if not by_value.get(first) or not by_value.get(v):
                    ratios.append("-")
                    continue
                c = stats.compare_samples(by_value[first], by_value[v], direction)
                if c.verdict == "not enough data":
                    ratios.append(f"{c.ratio:.2f}× (not enough data)")
                    continue
                verdict = {"faster": "better", "slower": "worse", "no change": "inside the noise"}[c.verdict]
                ratios.append(f"{c.ratio:.2f}× [{c.ci_low:.2f}, {c.ci_high:.2f}], {verdict}")
            rows.append([row, stack, *medians, *ratios])
        if rows:
            note = (
                f"{direction} is better; ratio of medians [95 % interval], separated or not by the test `compare` uses"
            )
            out.append((f"{title} by {axis} ({note})", header, rows))
    return out


Grid = tuple[list[str], list[tuple[str, dict[str, list[float] | str]]]]


def metric_grid(kind: str, group: dict[str, list[dict[str, Any]]], metric: str) -> Grid:
    """Columns (filesystems) and rows (inputs) of one metric; each entry the passed runs' values, or
    the status text when none passed. Empty when no entry has a value."""
    rows: dict[str, dict[str, list[float] | str]] = defaultdict(dict)
    columns: list[str] = []
    for ds in group.values():
        flat = flatten(ds[0]["params"])
        row, col = _row_label(kind, flat), _column_label(flat)
        if col not in columns:
            columns.append(col)
        values = [float(d["metrics"][metric]) for d in ds if d["status"] == "passed" and metric in d["metrics"]]
        rows[row][col] = values if values else sorted({d["status"] for d in ds})[0]
    if not any(isinstance(v, list) for r in rows.values() for v in r.values()):
        return [], []
    # Each storage stack's environment values side by side: the stacks in the order they came, the
    # values of an axis (the images) with its default first.
    stacks = list(dict.fromkeys(c.split(AXIS_SEPARATOR)[0] for c in columns))
    docs = [d for ds in group.values() for d in ds]
    order = [compare.axis_values(docs, axis) for axis in compare.ENV_AXES]

    def place(column: str) -> tuple[int, list[int]]:
        stack, *values = column.split(AXIS_SEPARATOR)
        return stacks.index(stack), [order[i].index(v) if v in order[i] else 0 for i, v in enumerate(values)]

    columns.sort(key=place)
    return columns, list(rows.items())


def regime_grid(kind: str, group: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], str]:
    """(row, column) → the regime of that cell's runs, for the same rows and columns as metric_grid."""
    out = {}
    for ds in group.values():
        flat = flatten(ds[0]["params"])
        out[(_row_label(kind, flat), _column_label(flat))] = regime(ds)
    return out


def _metric_table(kind: str, group: dict[str, list[dict[str, Any]]], metric: str, direction: str) -> list[str]:
    columns, rows = metric_grid(kind, group, metric)
    if not columns:
        return []
    regimes = regime_grid(kind, group)
    out = ["| " + " | ".join(["input", *columns]) + " |", "|" + "---|" * (len(columns) + 1)]
    for row, entries in rows:
        ranked = rank(entries, direction)
        texts = []
        for col in columns:
            value = entries.get(col, "")
            texts.append(_cell_text(ranked[col], regimes.get((row, col), "")) if col in ranked else str(value))
        out.append("| " + " | ".join([row, *texts]) + " |")
    return out


def overview_tables(kind: str, group: dict[str, list[dict[str, Any]]]) -> list[tuple[str, list[str], list[list[str]]]]:
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
                    median = statistics.median(value)
                    spread = max(value) - min(value)
                    texts.append(
                        _fmt(median) + (f" ±{100 * spread / 2 / median:.0f}%" if len(value) > 1 and median else "")
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


def relative_speed_tables(
    kind: str, cells: dict[str, list[dict[str, Any]]]
) -> list[tuple[str, list[str], list[list[str]]]]:
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
        flat = flatten(ds[0]["params"])
        key = tuple(sorted((k, str(v)) for k, v in flat.items() if not database(k)))
        values = [float(d["metrics"][metric]) for d in ds if d["status"] == "passed" and metric in d["metrics"]]
        if values:
            families[key].append((flat, values))
    out = []
    for members in families.values():
        if len(members) < 2:
            continue
        varying = sorted(k for k in members[0][0] if database(k) and len({str(f[k]) for f, _ in members}) > 1)
        members.sort(key=lambda m: tuple(_order(m[0][k]) for k in varying))  # False before True, low before high
        reference = statistics.median(members[0][1])
        flat0 = members[0][0]
        header = ["filesystem", *(k.partition(".")[2] for k in varying), title, "relative speed"]
        rows = []
        for flat, values in members:
            med = statistics.median(values)
            speed = (reference / med if direction == "lower" else med / reference) if med and reference else 0.0
            rows.append([str(flat["filesystem"]), *(str(flat[k]) for k in varying), _fmt(med), f"{speed:.0%}"])
        label = f"{_column_label(flat0)}, input {_row_label(kind, flat0)}"
        out.append((f"Relative speed ({label})", header, rows))
    return out


def _status_section(by_cell: dict[str, list[dict[str, Any]]]) -> list[str]:
    lines = ["## Runs and verification", "", "| cell | runs | status | verification |", "|---|---|---|---|"]
    for cid, ds in sorted(by_cell.items()):
        statuses = ", ".join(f"{s}×{[d['status'] for d in ds].count(s)}" for s in sorted({d["status"] for d in ds}))
        ver = ds[0].get("verification", {})
        ref = ver.get("reference")
        text = ver.get("status", "-")
        if ref:
            text += f" (reference {ref.get('longest_sequence')}, {ref.get('largest_number')}; {ref.get('source')})"
        reasons = {d.get("reason") for d in ds if d.get("reason")}
        if reasons:
            text += "; " + "; ".join(sorted(str(r) for r in reasons))
        lines.append(f"| {cid} | {len(ds)} | {statuses} | {text} |")
    return [*lines, ""]


def write_report(run_dir: Path, title: str) -> tuple[Path, answer.Answer]:
    """``run_dir``/report.md, and the answer it opens with (built once from the run's documents and
    its matrix.json, for the caller to print too)."""
    path = run_dir / "report.md"
    docs = results.load_results(run_dir)
    matrix_json = results.load_matrix_json(run_dir)
    found = answer.build(docs, matrix_json)
    race_path = run_dir / "race.json"
    race = json.loads(race_path.read_text(encoding="utf-8")) if race_path.exists() else None
    text = markdown(docs, title, found, matrix_json, race)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path, found
