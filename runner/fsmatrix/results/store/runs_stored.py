"""Run folders into a database store (``fsmatrix results push``), and what a store holds, by run
(``fsmatrix results list``).

What ``results list`` lists is a *sitting*: one run id on one host at one time, the documents of a
run id and host whose start times follow each other with no gap over ``SITTING_GAP`` (a run id that
two nights share is two sittings: run ids repeat, nights do not overlap). Not ``past_runs.StoredRun``,
one passed run the estimates read.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fsmatrix.errors import UserError
from fsmatrix.results.store.document import Result
from fsmatrix.results.store.files import iter_result_files, load_document
from fsmatrix.results.store.records import run_matrix

SITTING_GAP = timedelta(hours=6)


def run_documents(run_dirs: Sequence[Path]) -> list[Result]:
    """Every result document of these run folders, each folder checked to be one `fsmatrix run`
    wrote (its matrix.json) before any is read: bad input stops the push before anything is written."""
    for run_dir in run_dirs:
        run_matrix(run_dir)
    results = [load_document(path) for run_dir in run_dirs for path in iter_result_files(run_dir)]
    if not results:
        raise UserError(f"no result documents under {', '.join(str(d) for d in run_dirs)}")
    return results


def parse_since(text: str) -> str:
    """``--since``: a date (2026-11-28) or a time (2026-11-28T02:00, UTC unless it says): as ISO 8601 UTC."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"--since {text!r}: not a date; expected YYYY-MM-DD or YYYY-MM-DDTHH:MM[+ZONE]") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).isoformat()


@dataclass(frozen=True)
class Sitting:
    """One sitting of a run id on a host, as ``results list`` shows it."""

    run_id: str
    host: str | None
    started: str
    cells: int
    documents: int


def sittings(
    rows: Sequence[tuple[str, str | None, str, str | None, str | None]], only: Sequence[str] = ()
) -> list[Sitting]:
    """The sittings among (run id, host, cell id, started, finished) rows in time order, their
    cells matching ``only`` (globs; all without)."""
    patterns = [p for text in only for p in text.split(",") if p]
    sittings: dict[tuple[str, str | None], list[list[tuple[str, str | None, str | None]]]] = {}
    for run_id, host, cell_id, started, finished in rows:
        if patterns and not any(fnmatch.fnmatchcase(cell_id, p) for p in patterns):
            continue
        runs = sittings.setdefault((run_id, host), [])
        if runs and not _same_sitting(runs[-1][-1], started):
            runs.append([])
        if not runs:
            runs.append([])
        runs[-1].append((cell_id, started, finished))
    out = []
    for (run_id, host), runs in sittings.items():
        for docs in runs:
            first = min((s for _, s, _ in docs if s), default="")
            out.append(Sitting(run_id, host, first, len({c for c, _, _ in docs}), len(docs)))
    return sorted(out, key=lambda r: (r.started, r.run_id, r.host or ""))


def _same_sitting(previous: tuple[str, str | None, str | None], started: str | None) -> bool:
    _, prev_started, prev_finished = previous
    last = _time(prev_finished) or _time(prev_started)
    now = _time(started)
    return last is None or now is None or now - last <= SITTING_GAP


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def listing_json(total: int, runs: Sequence[Sitting]) -> dict[str, Any]:
    return {
        "documents": total,
        "runs": [
            {"run_id": r.run_id, "host": r.host, "started": r.started, "cells": r.cells, "documents": r.documents}
            for r in runs
        ],
    }


def listing_markdown(shown: str, total: int, runs: Sequence[Sitting]) -> str:
    lines = [f"## {shown}: {total:,} documents, {len(runs)} runs", ""]
    if runs:
        lines += ["| run id | host | started | cells | documents |", "|---|---|---|---|---|"]
        lines += [f"| {r.run_id} | {(r.host or '-')[:12]} | {r.started} | {r.cells} | {r.documents} |" for r in runs]
    return "\n".join(lines) + "\n"
