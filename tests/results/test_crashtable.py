"""The report's crash table (results/crashtable.py), in Markdown and HTML, from result documents.

The crash sections below are the shapes real runs write (taken from qemu power-cut runs of
2026-11-25: pgbench with synchronous_commit=on, pgbench with fsync=off, GT.M 3n+1), cut down to
what the table reads.
"""

from __future__ import annotations

import copy
import html.parser
from typing import Any

from conftest import typed
from fsmatrix.matrix import expand_document
from fsmatrix.results.render import crashtable, markdown
from fsmatrix.results.render import page as html_page
from fsmatrix.results.verdict import crash, report

PG_ON = "ext4-crash-power-cut-pgbench-tpcb-like-s1-c2-ee858ca7"
PG_FSYNC_OFF = "ext4-crash-power-cut-pgbench-tpcb-like-s1-c2-5af15a88"
THREEN1 = "ext4-crash-power-cut-threen1-1-300000-w2-0c1e2f3a"
LOSS = (
    "durability: 277 of 277 acknowledged commits are missing after recovery (the table fsmatrix_acks itself "
    "is gone); fsync=off: nothing is forced to stable storage; failed after the crash: durability"
)


def _section(**changes: Any) -> dict[str, Any]:
    section: dict[str, Any] = {
        "mode": "power-cut",
        "after_s": 5,
        "fired": True,
        "fired_at_s": 5.014,
        "measured_s": 5.014,
        "mount_s": 0.321,
        "recovery_s": 4.632,
        "steps": [
            {"name": "acknowledged commits", "seconds": 0.0, "status": "ok", "detail": "203"},
            {"name": "controldata", "seconds": 0.173, "status": "ok", "detail": "in production"},
            {"name": "start", "seconds": 4.677, "status": "ok", "detail": "ready after 4.632 s"},
        ],
        "checks": [
            {"name": "invariant", "verdict": "passed", "message": "row counts and the TPC-B invariant hold"},
            {"name": "durability", "verdict": "passed", "message": "all 203 acknowledged commits found"},
            {"name": "amcheck", "verdict": "passed", "message": "clean"},
        ],
        "reused": {},
        "lost_commits": 0,
        "acknowledged": 203,
    }
    section.update(changes)
    return section


def _doc(cell_id: str, workload: str, status: str, crash: dict[str, Any] | None, reason: str | None = None,
         repeat: int = 1) -> dict[str, Any]:  # fmt: skip
    doc: dict[str, Any] = {
        "cell_id": cell_id,
        "repeat": repeat,
        "workload": workload,
        "status": status,
        "reason": reason,
        "params": _params(workload),
        "metrics": {"recovery_s": 1.0} if status == "passed" else {},
        "key_metrics": {},
        "verification": {"status": "passed" if status == "passed" else "failed"},
        "provenance": {},
    }
    if crash is not None:
        doc["crash"] = crash
    return doc


def _params(workload: str, **settings: Any) -> dict[str, Any]:
    """A whole cell's parameters, as a result holds them (the report reads its row keys)."""
    params = {"scale": 1} if workload == "pgbench" else {"start": 1, "end": 1000}
    doc = {"include": [{"filesystem": "ext4", "workload": {workload: params}, **settings}]}
    return expand_document(doc, "t").cells[0].params


def _fsync_off_section() -> dict[str, Any]:
    section = _section(fired_at_s=5.007, mount_s=0.272, recovery_s=1.442, lost_commits=277, acknowledged=277)
    section["checks"][1] = {"name": "durability", "verdict": "failed", "message": LOSS.split("; failed")[0]}
    return section


def _threen1_section() -> dict[str, Any]:
    return _section(
        fired_at_s=3.004,
        mount_s=0.149,
        recovery_s=1.55,
        lost_commits=None,
        acknowledged=None,
        steps=[{"name": "mupip journal -recover -backward", "seconds": 1.55, "status": "ok", "detail": ""}],
        checks=[{"name": "mupip integ", "verdict": "passed", "message": "clean"}],
        reused={"step_entries": 51288, "starting_numbers_done": 48925, "starting_numbers": 300000},
    )


def _docs() -> list[dict[str, Any]]:
    fsync_off = _doc(PG_FSYNC_OFF, "pgbench", "failed", _fsync_off_section(), LOSS)
    fsync_off["params"] = _params("pgbench", postgres={"fsync": False})
    return [
        fsync_off,
        _doc(PG_ON, "pgbench", "passed", _section()),
        _doc(THREEN1, "threen1", "passed", _threen1_section()),
        _doc("ext4-threen1-1-1000-w2-00000000", "threen1", "passed", None),  # no crash: no row
    ]


def test_rows_say_recovered_lost_commits_mount_recovery_and_reuse() -> None:
    rows = {r.cell: r for r in crashtable.crash_rows(typed(_docs()[:2]))}
    assert sorted(rows) == sorted([PG_ON, PG_FSYNC_OFF])
    on = rows[PG_ON]
    assert on.cells() == [PG_ON, "postgres.fsync=True", "r1", "power-cut at 5.01 s", "yes", "0 of 203", "0.321",
                          "4.63", "–", "passed"]  # fmt: skip
    off = rows[PG_FSYNC_OFF]
    assert (off.settings, off.recovered, off.lost, off.status) == (
        "postgres.fsync=False", "no: durability failed", "277 of 277", "failed")  # fmt: skip
    assert crashtable.varying_settings(typed(_docs()[1:2])) == {PG_ON: ""}  # one cell: nothing sets it apart
    # Compared within a workload: 3n+1 has no postgres.fsync, which does not set it apart.
    other = _doc("ext4-crash-power-cut-threen1-1-1000-w2-11111111", "threen1", "passed", _threen1_section())
    other["params"] = _params("threen1", gtm={"journal": "nobefore"})
    assert crashtable.varying_settings(typed(_docs()[:3] + [other])) == {
        PG_FSYNC_OFF: "postgres.fsync=False", PG_ON: "postgres.fsync=True",
        THREEN1: "gtm.journal=before", other["cell_id"]: "gtm.journal=nobefore"}  # fmt: skip
    rows = {r.cell: r for r in crashtable.crash_rows(typed(_docs()))}
    assert sorted(rows) == sorted([PG_ON, PG_FSYNC_OFF, THREEN1])  # the uncrashed run has none
    gtm = rows[THREEN1]
    assert (gtm.lost, gtm.mount_s, gtm.reused) == ("–", "0.149", "48,925 of 300,000 starting numbers")


def test_recovered_names_a_failed_step_a_crash_that_never_fired_and_a_missing_recovery() -> None:
    started = _section()
    started["steps"][2] = {"name": "start", "seconds": 2.0, "status": "failed", "detail": "PANIC: ..."}
    assert crash.recovery_status(started) == "no: start failed"
    assert crash.recovery_status({"mode": "power-cut", "after_s": 900, "fired": False}) == "no: not crashed"
    assert crash.recovery_status(_section(steps=[], checks=[])) == "no: no recovery recorded"
    not_fired = _doc(PG_ON, "pgbench", "failed", {"mode": "power-cut", "after_s": 900, "fired": False}, "x")
    row = crashtable.crash_rows(typed([not_fired]))[0]
    assert row.crash == "power-cut: not fired (after_s 900)" and row.mount_s == row.lost == "–"


def test_findings_name_every_run_that_did_not_pass_with_its_reason() -> None:
    docs = _docs()
    docs.append(_doc(PG_ON, "pgbench", "timeout", _section(steps=[], checks=[]), None, repeat=2))
    assert crashtable.findings(typed(docs)) == [
        f"{PG_FSYNC_OFF} r1 failed: {LOSS}",
        f"{PG_ON} r2 timeout: no: no recovery recorded",  # no reason given: the table's verdict
    ]
    passed = [d for d in _docs() if d["status"] == "passed"]
    assert crashtable.findings(typed(passed)) == []


def test_markdown_section() -> None:
    lines = crashtable.markdown_section(typed(_docs()))
    text = "\n".join(lines)
    assert lines[0] == "## Crash recovery"
    assert "| " + " | ".join(crashtable.HEADER) + " |" in lines
    assert crashtable.HEADER[5:8] == ("lost commits", "mount s", "recovery s")
    assert "| r1 | power-cut at 5.01 s | no: durability failed | 277 of 277 | 0.272 |" in text
    assert text.count("\n| ext4-crash-") == 3
    findings = lines[lines.index("**Findings**") + 2 :]
    assert findings[0] == f"- {PG_FSYNC_OFF} r1 failed: {LOSS}"
    # A '|' in a reason must not split the Markdown row.
    piped = _docs()[:1]
    piped[0]["reason"] = "a | b"
    assert "- " + PG_FSYNC_OFF + " r1 failed: a \\| b" in crashtable.markdown_section(typed(piped))
    # Only passed runs: no findings list; no crash results: no section at all.
    assert "**Findings**" not in crashtable.markdown_section(typed(_docs()[1:]))
    assert crashtable.markdown_section(typed(_docs()[3:])) == []


def test_the_markdown_report_has_the_section_only_with_crash_results() -> None:
    text = markdown.markdown(report.of_results(typed(_docs())), "t")
    assert "## Crash recovery" in text and "277 of 277" in text
    assert text.index("## Crash recovery") < text.index("## Runs and verification")
    assert "## Crash recovery" not in markdown.markdown(report.of_results(typed(_docs()[3:])), "t")


class _Tables(html.parser.HTMLParser):
    """Every table's rows as lists of cell text, with each row's class; list items."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, list[str]]] = []
        self.items: list[str] = []
        self._text: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append((dict(attrs).get("class") or "", []))
        elif tag in ("td", "th", "li"):
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._text is not None:
            self.rows[-1][1].append("".join(self._text))
            self._text = None
        elif tag == "li" and self._text is not None:
            self.items.append("".join(self._text))
            self._text = None


def test_html_section_parses_marks_failed_rows_and_escapes() -> None:
    docs = copy.deepcopy(_docs())
    docs[0]["reason"] = "durability: <lost> & gone"
    parser = _Tables()
    parser.feed("".join(crashtable.html_section(typed(docs))))
    header, *rows = parser.rows
    assert header[1] == list(crashtable.HEADER)
    by_cell = {cells[0]: (css, cells) for css, cells in rows}
    css, cells = by_cell[PG_FSYNC_OFF]
    assert css == "failed" and "postgres.fsync=False" in cells[1]
    assert cells[2:] == ["r1", "power-cut at 5.01 s", "no: durability failed", "277 of 277", "0.272", "1.44", "–",
                         "failed"]  # fmt: skip
    assert by_cell[PG_ON][0] == "" and by_cell[THREEN1][1][8] == "48,925 of 300,000 starting numbers"
    assert parser.items == [f"{PG_FSYNC_OFF} r1 failed: durability: <lost> & gone"]  # escaped, read back whole
    assert crashtable.html_section(typed(_docs()[3:])) == []


def test_the_html_report_has_the_section_only_with_crash_results() -> None:
    page = html_page.html_report(report.of_results(typed(_docs())), "t")
    assert "<h2>Crash recovery</h2>" in page and "277 of 277" in page
    assert page.index("<h2>Crash recovery</h2>") < page.index("<h2>Runs and verification</h2>")
    assert "Crash recovery" not in html_page.html_report(report.of_results(typed(_docs()[3:])), "t")
