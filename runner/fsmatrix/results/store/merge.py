"""Merging CI shards: the result documents of several results roots or run directories into one."""

from __future__ import annotations

from pathlib import Path

from fsmatrix.agent import jsonfile
from fsmatrix.errors import UserError
from fsmatrix.results.store.files import iter_result_files, result_path
from fsmatrix.results.store.root_store import RootStore


def merge(sources: list[Path], root: Path) -> tuple[int, int]:
    """Copy every result document (and its log) under ``sources`` into the results root ``root``.

    Sources are results roots or run directories as CI artifacts hold them (``<run-id>/<cell>/r<N>.json``).
    A document already present with the same content is skipped; one that differs is an error, so a
    merge never silently replaces a measurement. Returns (copied, already present); re-indexes ``root``.
    """
    copied = same = 0
    index = RootStore(root)
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
        return  # an unreadable record: the answer then falls back to cell ids (``load_run_matrix``)
    if not (isinstance(have, dict) and isinstance(add, dict) and isinstance(have.get("cells"), list)):
        return
    known = {c.get("id") for c in have["cells"] if isinstance(c, dict)}
    new = [c for c in add.get("cells") or [] if isinstance(c, dict) and c.get("id") not in known]
    if new:
        jsonfile.write_atomic(target, {**have, "cells": have["cells"] + new})
