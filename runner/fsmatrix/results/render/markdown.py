"""Markdown reports shaped like the seed documents' tables, opened by the answer (verdict/answering.py).

The report begins with "The answer" (what the runs decided, per comparison group), then the
environment, the tables' legend once (``TABLE_LEGEND``), and the tables.
For each workload, rows are its input (its declaration's row keys: the 3n+1 range, the fio
pattern, ...) and columns the filesystem; one table per key metric (the declaration's titles), each
value the median over repeats with its spread and the runs' regime (CPU- or IO-bound), marked with
the answer's words over its row (``groups.rank``): bold when best, else "worse", "equivalent" or
"not separated", with how many times the leading median it is. Cells that differ in any other
setting go in separate tables, headed by what differs.

An environment axis of the cells (``environment.ENV_AXES``: the guest image) is part of the columns: a
matrix that crosses images shows each storage stack on each image side by side ("ext4 · debian13"),
followed by a table of each image's ratio to the first one (the answer's ratio of medians and its
interval, and whether the test separates them), and its environment section names the kernels each
image brought instead of warning about mixed environments.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from fsmatrix.agent import workloads
from fsmatrix.results import store
from fsmatrix.results.render import answer_text, crashtable, seed
from fsmatrix.results.render.race import race_section
from fsmatrix.results.render.tables import (
    TABLE_LEGEND,
    environment_axis_tables,
    metric_grid,
    metric_table,
    metric_tables,
    overview_tables,
    relative_speed_tables,
    repeats_note,
    tabled,
    work_margin,
    workload_groups,
)
from fsmatrix.results.store import Result
from fsmatrix.results.verdict import answer, environment, hardware
from fsmatrix.results.verdict.environment import environments, explained_by_axes, mixed_environments
from fsmatrix.results.verdict.report import Report, of_run


def markdown(found: Report, title: str) -> str:
    """The whole report: the answer first, the race when the run raced (its race.json), then the
    environment and the tables."""
    docs = found.results
    lines = [f"# fsmatrix report: {title}", "", *answer_text.markdown_lines(found.answer)]
    if found.race is not None:
        lines += race_section(found.race)
    lines += _environment_section(docs)
    by_cell: dict[str, list[Result]] = defaultdict(list)
    for doc in docs:
        by_cell[doc.cell_id].append(doc)
    sections: list[str] = []
    tables_shown = 0
    for kind, tables in metric_tables(by_cell).items():
        cells = {cid: ds for cid, ds in by_cell.items() if ds[0].workload == kind}
        if cells:
            section, shown = _workload_section(kind, tables, cells, found.answer)
            sections += section
            tables_shown += shown
    if tables_shown:
        lines += [f"How to read the tables: {TABLE_LEGEND}.", ""]
    lines += sections
    lines += crashtable.markdown_section(docs)
    lines += seed.markdown(docs)  # a seed matrix's results beside the seed's published tables
    lines += _status_section(by_cell)
    return "\n".join(lines) + "\n"


def _environment_section(docs: list[Result]) -> list[str]:
    envs = environments(docs)
    shas = {str((doc.provenance.section).get("git", {}).get("sha", "unknown"))[:12] for doc in docs}
    # VM results: the agent's commit is the image's; the host side that drove the guest has its own.
    host_shas = {str(((doc.provenance.section).get("host") or {}).get("fsmatrix_git", ""))[:12] for doc in docs}
    host_shas.discard("")
    explained = explained_by_axes(docs)
    lines = ["## Environment", ""]
    for axis in environment.varying_axes(docs):
        named = ", ".join(environment.axis_values(docs, axis))
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


def _workload_section(
    kind: str, tables: list[tuple[str, str, str]], cells: dict[str, list[Result]], answered: answer.Answer
) -> tuple[list[str], int]:
    """The workload's section, and how many metric tables (those the legend explains) it has."""
    lines = [f"## {kind}", ""]
    shown = 0
    margin = work_margin(answered)
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
        for metric, title, direction in tables:
            table = (
                metric_table(kind, group, metric, direction, alpha=answered.alpha, work_delta=margin)
                if tabled(group, metric)
                else []
            )
            if table:
                repeats = repeats_note(metric_grid(kind, group, metric)[1])
                lines += [f"**{title}** ({direction} is better; {repeats})", "", *table, ""]
                shown += 1
    for title, header, rows in [*environment_axis_tables(kind, cells), *relative_speed_tables(kind, cells)]:
        lines += [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    return lines, shown


def _status_section(by_cell: dict[str, list[Result]]) -> list[str]:
    lines = ["## Runs and verification", "", "| cell | runs | status | verification |", "|---|---|---|---|"]
    for cid, ds in sorted(by_cell.items()):
        statuses = ", ".join(f"{s}×{[d.status for d in ds].count(s)}" for s in sorted({d.status for d in ds}))
        ver = ds[0].verification
        ref = ver.reference
        text = ver.status or "-"
        if ref:
            text += f" (reference {ref.get('longest_sequence')}, {ref.get('largest_number')}; {ref.get('source')})"
        reasons = {d.reason for d in ds if d.reason}
        if reasons:
            text += "; " + "; ".join(sorted(str(r) for r in reasons))
        lines.append(f"| {cid} | {len(ds)} | {statuses} | {text} |")
    return [*lines, ""]


def write_report(run_dir: Path, title: str) -> tuple[Path, answer.Answer]:
    """``run_dir``/report.md, and the answer it opens with (for the caller to print too)."""
    path = run_dir / "report.md"
    found = of_run(store.load_run_records(run_dir))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(markdown(found, title), encoding="utf-8")
    tmp.replace(path)
    return path, found.answer
