"""Where results live: one JSON document per run, and an SQLite index over all of them.

Layout under a results root::

    <root>/index.sqlite                       the index (rebuildable from the files)
    <root>/<run-id>/matrix.json               the expanded matrix this run was made from
    <root>/<run-id>/<cell-id>/r<N>.json       one result document per repeat
    <root>/<run-id>/<cell-id>/r<N>.log        the agent's log for that repeat
    <root>/<run-id>/report.md                 the report written at the end of `fsmatrix run`
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fsmatrix.agent import jsonfile
from fsmatrix.agent.job import SCHEMA_VERSION
from fsmatrix.errors import UserError

COMPLETE = ("passed", "skipped")  # a resumed run does these again only with --force


def regime(docs: list[dict[str, Any]]) -> str:
    """Whether the passed runs were CPU-bound, IO-bound or mixed (the sampler's class, most runs')."""
    bounds = [str((d.get("samples") or {}).get("bound") or "") for d in docs if d.get("status") == "passed"]
    bounds = [b for b in bounds if b]
    return max(sorted(set(bounds)), key=bounds.count) if bounds else ""


def result_path(run_dir: Path, cell_id: str, repeat: int) -> Path:
    return run_dir / cell_id / f"r{repeat}.json"


def is_complete(path: Path) -> bool:
    try:
        return jsonfile.read(path).get("status") in COMPLETE
    except (OSError, ValueError):
        return False


def iter_result_files(directory: Path) -> Iterator[Path]:
    """Result documents under a run directory or a whole results root."""
    for path in sorted(directory.rglob("r*.json")):
        if path.stem[1:].isdigit():
            yield path


def load_document(path: Path) -> dict[str, Any]:
    """One result document, checked to be of the schema version this fsmatrix reads."""
    try:
        doc = jsonfile.read(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable result document ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        found = doc.get("schema_version") if isinstance(doc, dict) else None
        raise UserError(f"{path}: result schema version {found!r}; this fsmatrix reads version {SCHEMA_VERSION}")
    problem = document_problem(doc)
    if problem:
        raise UserError(f"{path}: not a usable result document: {problem}")
    doc["_path"] = str(path)
    return doc


DIRECTIONS = ("lower", "higher")


def document_problem(doc: dict[str, Any]) -> str | None:
    """What makes a result document unusable for compare/report (None when nothing does): the
    fields every reader indexes without looking, checked once here instead of a KeyError later."""
    cell_id = doc.get("cell_id")
    if not isinstance(cell_id, str) or not cell_id:
        return f"cell_id is {cell_id!r}; expected the cell's id (a non-empty string)"
    repeat = doc.get("repeat")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        return f"repeat is {repeat!r}; expected an integer >= 1"
    if not isinstance(doc.get("status"), str):
        return f"status is {doc.get('status')!r}; expected a string such as 'passed'"
    metrics = doc.get("metrics", {})
    if not isinstance(metrics, dict):
        return f"metrics is {type(metrics).__name__}; expected a mapping of metric -> number"
    key_metrics = doc.get("key_metrics", {})
    if not isinstance(key_metrics, dict):
        return f"key_metrics is {type(key_metrics).__name__}; expected a mapping of metric -> 'lower' or 'higher'"
    for name, direction in key_metrics.items():
        if direction not in DIRECTIONS:
            return f"key_metrics.{name} is {direction!r}; expected 'lower' or 'higher'"
    for name, value in metrics.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            return f"metrics.{name} is {value!r}; expected a number"
    return None


def load_results(directory: Path) -> list[dict[str, Any]]:
    """Every result document under ``directory``; UserError when there is nothing usable."""
    if not directory.is_dir():
        raise UserError(f"results directory {directory} does not exist")
    docs = [load_document(path) for path in iter_result_files(directory)]
    if not docs:
        raise UserError(f"no result documents under {directory}")
    return docs


def load_matrix_json(directory: Path) -> dict[str, Any] | None:
    """The expanded matrix a run was made from (``<run>/matrix.json``), for the answer's baselines and
    the cells' order. Under a results root, every run's ``matrix.json`` in one: the cells of all of
    them (a cell id once, the first run's), and the ``baseline_rule`` when they agree. None when
    there is none or it cannot be read: the answer then chooses baselines by cell id."""
    own = directory / "matrix.json"
    paths = [own] if own.is_file() else sorted(directory.glob("*/matrix.json"))
    found = []
    for path in paths:
        try:
            doc = jsonfile.read(path)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("cells"), list):
            found.append(doc)
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    cells: dict[str, Any] = {}
    for doc in found:
        for cell in doc["cells"]:
            if isinstance(cell, dict) and isinstance(cell.get("id"), str):
                cells.setdefault(cell["id"], cell)
    rules = {doc.get("baseline_rule") for doc in found}
    merged: dict[str, Any] = {"name": ", ".join(str(doc.get("name")) for doc in found), "cells": list(cells.values())}
    if len(rules) == 1 and None not in rules:
        merged["baseline_rule"] = rules.pop()
    return merged


def run_matrix(run_dir: Path) -> dict[str, Any]:
    """The expanded matrix of one stored run (``RUN_DIR/matrix.json``), each of its ``cells`` checked
    to have an ``id`` and ``params``. UserError when ``run_dir`` is not a directory `fsmatrix run` wrote."""
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    matrix_json = load_matrix_json(run_dir) if (run_dir / "matrix.json").is_file() else None
    if matrix_json is None:
        raise UserError(f"{run_dir}: no matrix.json; expected a directory `fsmatrix run` wrote (RESULTS/RUN_ID)")
    bad = [c for c in matrix_json["cells"] if not (isinstance(c, dict) and "id" in c and "params" in c)]
    if bad:
        raise UserError(f"{run_dir}/matrix.json: cannot read its cells (one without an id and params: {bad[0]!r:.80})")
    return matrix_json


class Index:
    """SQLite index of runs: what ran, where its document is, and its metrics (for quick queries)."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.path = root / "index.sqlite"
        self.db = sqlite3.connect(self.path, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(
            """CREATE TABLE IF NOT EXISTS runs (
                 run_id TEXT NOT NULL, cell_id TEXT NOT NULL, repeat INTEGER NOT NULL,
                 status TEXT NOT NULL, workload TEXT, filesystem TEXT, started_at TEXT,
                 duration_s REAL, git_sha TEXT, kernel TEXT, backend TEXT, path TEXT NOT NULL,
                 metrics TEXT NOT NULL,
                 PRIMARY KEY (run_id, cell_id, repeat))"""
        )

    def add(self, run_id: str, doc: dict[str, Any], path: Path) -> None:
        prov = doc.get("provenance", {})
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id,
                    doc["cell_id"],
                    doc["repeat"],
                    doc["status"],
                    doc.get("workload"),
                    doc.get("params", {}).get("filesystem"),
                    doc.get("started_at"),
                    doc.get("duration_s"),
                    prov.get("git", {}).get("sha"),
                    prov.get("kernel"),
                    prov.get("backend"),
                    str(path),
                    json.dumps(doc.get("metrics", {})),
                ),
            )

    def rows(self, run_id: str | None = None) -> list[sqlite3.Row]:
        self.db.row_factory = sqlite3.Row
        query = "SELECT * FROM runs" + (" WHERE run_id = ?" if run_id else "") + " ORDER BY run_id, cell_id, repeat"
        return list(self.db.execute(query, (run_id,) if run_id else ()))

    def close(self) -> None:
        self.db.close()


def merge(sources: list[Path], root: Path) -> tuple[int, int]:
    """Copy every result document (and its log) under ``sources`` into the results root ``root``.

    Sources are results roots or run directories as CI artifacts hold them (``<run-id>/<cell>/r<N>.json``).
    A document already present with the same content is skipped; one that differs is an error, so a
    merge never silently replaces a measurement. Returns (copied, already present); re-indexes ``root``.
    """
    copied = same = 0
    index = Index(root)
    try:
        for source in sources:
            for path in iter_result_files(source):
                doc = jsonfile.read(path)
                run_id = doc.get("run_id") or path.parent.parent.name
                target = result_path(root / run_id, doc["cell_id"], doc["repeat"])
                if target.resolve() == path.resolve():
                    continue
                if target.exists():
                    if jsonfile.read(target) != doc:
                        raise UserError(
                            f"{path}: {target} already holds a different result for this run, cell and repeat"
                        )
                    same += 1
                    continue
                jsonfile.write_atomic(target, doc)
                log_file = path.with_suffix(".log")
                if log_file.exists():
                    target.with_suffix(".log").write_bytes(log_file.read_bytes())
                index.add(run_id, doc, target)
                copied += 1
            for matrix_json in source.rglob("matrix.json"):
                run_dir = root / matrix_json.parent.name
                if run_dir.is_dir():
                    _merge_matrix_json(run_dir / "matrix.json", matrix_json)
    finally:
        index.close()
    return copied, same


def _merge_matrix_json(target: Path, source: Path) -> None:
    """``target`` holds every cell of the run: each shard's ``matrix.json`` lists its own cells only
    (and the whole matrix's baselines), so the cells of later shards are added to the first's."""
    if not target.exists():
        target.write_bytes(source.read_bytes())
        return
    try:
        have, add = jsonfile.read(target), jsonfile.read(source)
    except (OSError, ValueError):
        return  # an unreadable record: the answer then falls back to cell ids (load_matrix_json)
    if not (isinstance(have, dict) and isinstance(add, dict) and isinstance(have.get("cells"), list)):
        return
    known = {c.get("id") for c in have["cells"] if isinstance(c, dict)}
    new = [c for c in add.get("cells") or [] if isinstance(c, dict) and c.get("id") not in known]
    if new:
        jsonfile.write_atomic(target, {**have, "cells": have["cells"] + new})


def reindex(root: Path) -> int:
    """Rebuild the SQLite index of a results root from its documents; returns how many it holds."""
    (root / "index.sqlite").unlink(missing_ok=True)
    index = Index(root)
    count = 0
    try:
        for path in iter_result_files(root):
            doc = jsonfile.read(path)
            index.add(doc.get("run_id") or path.parent.parent.name, doc, path)
            count += 1
    finally:
        index.close()
    return count
