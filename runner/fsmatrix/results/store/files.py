"""Run folders: where `fsmatrix run` puts one JSON document per run (the layout: the store's
``__init__``), and how they are read back: each document checked and typed on the way in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fsmatrix.agent import jsonfile
from fsmatrix.agent.job import SCHEMA_VERSION
from fsmatrix.errors import UserError
from fsmatrix.results.store.document import Result

COMPLETE = ("passed", "skipped")  # a resumed run does these again only with --force
RACE_FILE = "race.json"  # a raced run's rounds and decisions, beside its results


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


def load_document(path: Path) -> Result:
    """One result document, checked to be of the schema version this fsmatrix reads, typed."""
    try:
        doc = jsonfile.read(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable result document ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        found = doc.get("schema_version") if isinstance(doc, dict) else None
        raise UserError(f"{path}: result schema version {found!r}; this fsmatrix reads version {SCHEMA_VERSION}")
    try:
        return Result.read(doc, path)
    except ValueError as problem:
        raise UserError(f"{path}: not a usable result document: {problem}") from None


def load_results(directory: Path) -> list[Result]:
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


def load_race(run_dir: Path) -> dict[str, Any] | None:
    """The race a run ran (``RUN_DIR/race.json``, written by `fsmatrix run --race`), or None."""
    path = run_dir / RACE_FILE
    race: dict[str, Any] | None = jsonfile.read(path) if path.exists() else None
    return race


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
