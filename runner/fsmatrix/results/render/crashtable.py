"""The report's crash table: one row per run of a crash cell (a result with a ``crash`` section).

Each row says whether the database came back (recovered?), how many acknowledged commits it lost
(pgbench), how long the filesystem's mount (its journal replay, ``mount_s``) and the database's own
recovery (``recovery_s``) took, and what work was found done and reused (3n+1). Every run that did
not pass is a *finding*, listed under the table with the reason the run gives (a lost commit, a
failed check, a crash that never fired): crash cells exist to find these.

``markdown_section(docs)`` and ``html_section(docs)`` are what markdown.py and page.py add;
both are empty when no result has a crash section. Built from the documents alone (no registry):
old results and unknown workloads get rows too.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsmatrix.matrix import flatten
from fsmatrix.results.store import Result
from fsmatrix.results.verdict.crash import recovery_status

HEADER = ("cell", "settings", "run", "crash", "recovered?", "lost commits", "mount s", "recovery s", "reused", "status")
MISSING = "–"  # not measured, or not applicable to this workload
LEGEND = (
    "settings: those that differ between the cells of a workload; recovered?: every recovery step "
    "succeeded and every check after it passed; lost commits: acknowledged commits missing after "
    "recovery, of those acknowledged (pgbench); mount s: mounting the crashed filesystem (its journal "
    "replay); recovery s: the database's own recovery; reused: work found done after the crash and "
    "not redone (3n+1)."
)


@dataclass(frozen=True)
class CrashRow:
    """One run of a crash cell, as the table shows it (every entry already text)."""

    cell: str
    settings: str  # what sets this cell apart from the table's other cells ("fs=ext4, postgres.fsync=False")
    run: str
    crash: str
    recovered: str
    lost: str
    mount_s: str
    recovery_s: str
    reused: str
    status: str

    def cells(self) -> list[str]:
        return [self.cell, self.settings, self.run, self.crash, self.recovered, self.lost, self.mount_s,
                self.recovery_s, self.reused, self.status]  # fmt: skip


def crash_docs(docs: list[Result]) -> list[Result]:
    """The results that have a crash section, by cell and repeat."""
    found = [d for d in docs if d.crash is not None]
    return sorted(found, key=lambda d: (str(d.cell_id), d.repeat))


def _seconds(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, int | float) and not isinstance(value, bool) else MISSING


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else MISSING


def _crash_text(section: Mapping[str, Any]) -> str:
    mode = str(section.get("mode") or "?")
    if not section.get("fired"):
        return f"{mode}: not fired (after_s {section.get('after_s')})"
    fired_at = section.get("fired_at_s")
    return f"{mode} at {fired_at:.2f} s" if isinstance(fired_at, int | float) else mode


def _lost_text(section: Mapping[str, Any]) -> str:
    lost, acknowledged = section.get("lost_commits"), section.get("acknowledged")
    if not isinstance(lost, int) or isinstance(lost, bool):
        return MISSING
    return f"{lost:,} of {acknowledged:,}" if isinstance(acknowledged, int) else f"{lost:,}"


def _reused_text(reused: Any) -> str:
    if not isinstance(reused, Mapping) or not reused:
        return MISSING
    done, total = reused.get("starting_numbers_done"), reused.get("starting_numbers")
    if isinstance(done, int) and isinstance(total, int):  # 3n+1: the share of the range found done
        return f"{done:,} of {total:,} starting numbers"
    return ", ".join(f"{k} {_count(v)}" for k, v in reused.items() if isinstance(v, int) and not isinstance(v, bool))


def varying_settings(docs: list[Result]) -> dict[str, str]:
    """cell id → the settings whose values differ between the cells of its workload, ``k=v, ...``
    (the cell id alone does not say that one pgbench cell has fsync off). Compared within a workload:
    3n+1's cells have no postgres settings, and that sets nothing apart. "" when all cells agree."""
    by_workload: dict[str, dict[str, dict[str, str]]] = {}
    for doc in docs:
        flats = by_workload.setdefault(str(doc.workload), {})
        flats[str(doc.cell_id)] = {k: str(v) for k, v in flatten(doc.params).items()}
    out = {}
    for flats in by_workload.values():
        keys = sorted({k for flat in flats.values() for k in flat})
        varying = [k for k in keys if len({flat.get(k, "") for flat in flats.values()}) > 1]
        out.update({cid: ", ".join(f"{k}={flat[k]}" for k in varying if k in flat) for cid, flat in flats.items()})
    return out


def crash_rows(docs: list[Result]) -> list[CrashRow]:
    """A row per result with a crash section."""
    rows = []
    crashed = crash_docs(docs)
    settings = varying_settings(crashed)
    for doc in crashed:
        section: Mapping[str, Any] = doc.crash or {}
        rows.append(
            CrashRow(
                cell=doc.cell_id,
                settings=settings.get(str(doc.cell_id), ""),
                run=f"r{doc.repeat}",
                crash=_crash_text(section),
                recovered=recovery_status(section),
                lost=_lost_text(section),
                mount_s=_seconds(section.get("mount_s")),
                recovery_s=_seconds(section.get("recovery_s")),
                reused=_reused_text(section.get("reused")),
                status=doc.status,
            )
        )
    return rows


def findings(docs: list[Result]) -> list[str]:
    """Every crash run that did not pass, with its reason (first line): what the crash found."""
    out = []
    for doc in crash_docs(docs):
        if doc.status == "passed":
            continue
        reason = str(doc.reason or "").strip().splitlines()
        why = reason[0] if reason else recovery_status(doc.crash or {})
        out.append(f"{doc.cell_id} r{doc.repeat} {doc.status}: {why}")
    return out


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_section(docs: list[Result]) -> list[str]:
    """The report's "Crash recovery" section in Markdown lines; [] without crash results."""
    rows = crash_rows(docs)
    if not rows:
        return []
    lines = ["## Crash recovery", "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(_md_escape(c) for c in row.cells()) + " |" for row in rows]
    lines += ["", LEGEND, ""]
    found = findings(docs)
    if found:
        lines += ["**Findings**", "", *(f"- {_md_escape(f)}" for f in found), ""]
    return lines


def html_section(docs: list[Result]) -> list[str]:
    """The same section as HTML fragments; [] without crash results. A row that did not recover is
    marked (class ``failed``)."""
    rows = crash_rows(docs)
    if not rows:
        return []
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = []
    for row in rows:
        css = "" if row.recovered == "yes" and row.status == "passed" else ' class="failed"'
        body.append(f"<tr{css}>" + "".join(f"<td>{html.escape(c)}</td>" for c in row.cells()) + "</tr>")
    parts = ["<h2>Crash recovery</h2>", f'<table class="crash"><tr>{head}</tr>{"".join(body)}</table>']
    parts.append(f"<p>{html.escape(LEGEND)}</p>")
    found = findings(docs)
    if found:
        items = "".join(f"<li>{html.escape(f)}</li>" for f in found)
        parts += ["<h3>Findings</h3>", f'<ul class="findings">{items}</ul>']
    return parts
