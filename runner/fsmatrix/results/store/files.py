"""Run folders: where `fsmatrix run` puts one JSON document per run (the layout: the store's
``__init__``), and how they are read back: each document checked and typed on the way in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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
