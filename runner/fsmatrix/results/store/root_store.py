"""A results root's one SQLite: its store (``<root>/store.sqlite``, ``database.Store``), which serves as
the root's index. `fsmatrix run` adds each document it writes (``RootStore.add``), `results merge` each one
it copies, `results reindex` every file under the root (``reindex``); the estimates read it
(``past_runs.py``), and it is the store `results push`, `list` and `history` use when none is named.
The files stay the truth: the store can always be filled again from them.

Before, a root had an index of its own beside it (``index.sqlite``, table ``runs``: what ran and where
its document is). The first time fsmatrix opens such a root's store, the documents that index names
are pushed into the store and ``index.sqlite`` is removed (``absorb``; the documents stay where they
are); an index that cannot be read is removed too (`fsmatrix results reindex` fills the store from
the files).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fsmatrix.errors import UserError
from fsmatrix.results.store.database import BATCH, Store
from fsmatrix.results.store.document import Result
from fsmatrix.results.store.files import iter_result_files, load_document, result_path
from fsmatrix.results.store.url import ROOT_STORE, StoreURL, parse

LEGACY_INDEX = "index.sqlite"  # a root's index before its store was its one SQLite
log = logging.getLogger("fsmatrix")


def root_url(root: Path) -> StoreURL:
    """The URL of ``root``'s own store."""
    return parse(f"sqlite:///{root / ROOT_STORE}")


def is_root_store(url: StoreURL, root: Path) -> bool:
    return url.scheme == "sqlite" and url.path.resolve() == (root / ROOT_STORE).resolve()


@contextlib.contextmanager
def open_root(root: Path, *, network_ok: bool = True) -> Iterator[Store]:
    """``root``'s store, created when missing, an old ``index.sqlite`` absorbed first. Taken on a network
    filesystem (``network_ok``: one `fsmatrix run` writes a root, as the old index was written: a Slurm
    task's, on the shared directory)."""
    with Store.open(root_url(root), network_ok=network_ok) as store:
        absorb(store, root)
        yield store


@contextlib.contextmanager
def open_store(url: StoreURL, results_root: Path) -> Iterator[Store]:
    """The store `results push`, `list` and `history` name (``url``); when it is ``results_root``'s own,
    an old index absorbed first. Refused on a network filesystem, as any SQLite store they name: many
    pushers at once want locks a network filesystem does not keep (docs/store.md)."""
    if is_root_store(url, results_root):
        with open_root(results_root, network_ok=False) as store:
            yield store
    else:
        with Store.open(url) as store:
            yield store


class RootStore:
    """A results root's store, kept open while `fsmatrix run` or `results merge` adds documents to it."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.path = root / ROOT_STORE
        self._opened = contextlib.ExitStack()
        self.store = self._opened.enter_context(open_root(root))

    def add(self, run_id: str, doc: dict[str, Any], path: Path) -> None:
        """The document just written to ``path``, stored under ``run_id`` (the folder's, for a document
        of an older fsmatrix that does not say its run). UserError when it is not a usable document."""
        try:
            result = Result.read(doc, path)
        except ValueError as problem:
            raise UserError(f"{path}: not a usable result document: {problem}") from None
        self.store.push([dataclasses.replace(result, run_id=run_id)])

    def close(self) -> None:
        self._opened.close()


def reindex(root: Path) -> int:
    """Every result document under ``root`` into its store (those already there stay once: a store is
    idempotent); returns how many documents there are."""
    paths = list(iter_result_files(root))
    with open_root(root) as store:
        for start in range(0, len(paths), BATCH):  # a batch of documents read at a time, not all of them
            store.push([_stored_as(load_document(p), p) for p in paths[start : start + BATCH]])
    return len(paths)


def _stored_as(result: Result, path: Path) -> Result:
    """A document of an older fsmatrix that does not say its run: under its run folder's name (as the
    index stored it)."""
    return result if result.run_id else dataclasses.replace(result, run_id=path.parent.parent.name)


def absorb(store: Store, root: Path) -> None:
    """An old ``root/index.sqlite``: the documents it names into ``store``, then the file removed."""
    legacy = root / LEGACY_INDEX
    if not legacy.is_file():
        return
    try:
        rows = _legacy_rows(legacy)
    except sqlite3.DatabaseError as exc:
        message = "%s: not a readable index (%s): removed; `fsmatrix results reindex %s` fills %s from the files"
        log.warning(message, legacy, exc, root, ROOT_STORE)
        rows = []
    found = []
    for run_id, cell_id, repeat, path in rows:
        result = legacy_document(root, run_id, cell_id, repeat, path)
        if result is not None:
            found.append(dataclasses.replace(result, run_id=run_id))
    store.push(found)  # a transaction a batch
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            legacy.with_name(legacy.name + suffix).unlink()
    if rows:
        message = "%s: its %d documents (%d of them readable) are in %s now; the index is removed"
        log.warning(message, legacy, len(rows), len(found), root / ROOT_STORE)


def _legacy_rows(legacy: Path) -> list[tuple[str, str, int, str]]:
    db = sqlite3.connect(f"file:{legacy}?mode=ro", uri=True, timeout=30)
    try:
        return [
            (str(r[0]), str(r[1]), int(r[2]), str(r[3]))
            for r in db.execute("SELECT run_id, cell_id, repeat, path FROM runs ORDER BY rowid")
        ]
    finally:
        db.close()


def legacy_document(root: Path, run_id: str, cell_id: str, repeat: int, path: str) -> Result | None:
    """A document an old index names: where the results layout puts it under ``root`` (the index's path
    may be relative to wherever that run was started), else where the index says; None when neither
    holds a usable one."""
    for candidate in (result_path(root / run_id, cell_id, repeat), Path(path)):
        try:
            return load_document(candidate)
        except UserError:  # missing, not JSON, not a usable document
            continue
    return None
