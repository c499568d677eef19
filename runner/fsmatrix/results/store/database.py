"""A database of result documents that every runner pushes to: SQLite embedded by default,
PostgreSQL for a fleet (``url.py`` says which). One schema for both (``schema.py``).

- **Idempotent**: a document's identity is the sha256 of its canonical JSON, so a document pushed
  twice is stored once. Run ids repeat across nights: the same run id, cell, repeat and host with
  other content is another run, stored beside the first and said so, never over it.
- **Atomic per batch**: each batch is one transaction; a pusher killed mid-batch leaves the store
  as it was before that batch.
- **Concurrent**: ``INSERT ... ON CONFLICT DO NOTHING`` on the identity; SQLite in WAL mode with a
  busy timeout (writers wait for each other instead of failing), PostgreSQL's own locking.
- A store it cannot reach is one line (``StoreUnreachable``, exit 1); a database that is not an
  fsmatrix store, or one of a newer schema, is refused (exit 2) before anything is written; an older
  one is migrated (``schema.py``), the columns and rows a migration adds filled from its documents.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import sqlite3
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fsmatrix.agent.work import WORK_METRICS
from fsmatrix.errors import UserError
from fsmatrix.results.store import schema
from fsmatrix.results.store.document import Result, comparison_group, hardware_class
from fsmatrix.results.store.url import StoreURL, check_local, network_filesystem

BATCH = 500  # documents per transaction
BUSY_TIMEOUT_MS = 60_000  # an SQLite writer waits this long for another before failing
CONNECT_TIMEOUT_S = 10


class StoreUnreachable(UserError):
    """The store cannot be reached (a server down, a socket missing): not bad input, exit 1."""

    exit_status = 1


def canonical(document: Mapping[str, Any]) -> str:
    """A document's canonical JSON: keys sorted, no spaces (what the store keeps, and hashes)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_id(text: str) -> str:
    """A document's identity in a store: the sha256 of its canonical JSON."""
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class ResultColumns:
    """The typed columns of one result, beside its whole document."""

    id: str
    run_id: str
    cell_id: str
    repeat: int
    host: str | None
    status: str
    workload: str
    comparison_group: str
    comparison_label: str
    hardware_class: str
    fsmatrix_commit: str | None
    settings_sha256: str | None
    kernel: str | None
    image: str | None
    backend: str | None
    tools: str  # JSON of the tool versions (GT.M, PostgreSQL, mkfs, fio, sysbench, ...)
    started_at: str | None
    finished_at: str | None
    duration_s: float | None
    document: str
    metrics: tuple[tuple[str, float, str, str], ...]  # (metric, value, direction, kind: schema.KEY or WORK)

    @classmethod
    def of(cls, result: Result) -> ResultColumns:
        prov = result.provenance
        settings = prov.section.get("settings")
        image = prov.image.get("name") if prov.image else None
        text = canonical(result.document)
        group, label = comparison_group(result.params, result.workload)
        return cls(
            id=content_id(text),
            run_id=result.run_id,
            cell_id=result.cell_id,
            repeat=result.repeat,
            host=prov.host.machine_id,
            status=result.status,
            workload=result.workload,
            comparison_group=group,
            comparison_label=label,
            hardware_class=hardware_class(result),
            fsmatrix_commit=prov.git_sha,
            settings_sha256=str(settings.get("sha256")) if isinstance(settings, Mapping) else None,
            kernel=prov.kernel,
            image=str(image) if image is not None else None,
            backend=prov.backend,
            tools=json.dumps(prov.section.get("tools") or {}, sort_keys=True),
            started_at=result.started_at,
            finished_at=result.finished_at,
            duration_s=result.duration_s,
            document=text,
            metrics=metric_rows(result),
        )


def metric_rows(result: Result) -> tuple[tuple[str, float, str, str], ...]:
    """The rows of ``result_metrics`` of one result: its key metrics, then the work metrics it measured
    that are not key metrics too (a None, not measured, is no row; nor is a value that is not finite)."""
    key = [(name, result.metrics.get(name), direction, schema.KEY) for name, direction in result.key_metrics.items()]
    work = [
        (m.name, result.metrics.get(m.name), m.better, schema.WORK)
        for m in WORK_METRICS
        if m.name not in result.key_metrics
    ]
    return tuple(
        (name, float(value), direction, kind)
        for name, value, direction, kind in key + work
        if isinstance(value, int | float) and math.isfinite(value)
    )


@dataclass
class Pushed:
    """What a push did."""

    documents: int = 0
    new: int = 0
    present: int = 0
    # (run id, cell id, repeat, host) whose content differs from a document stored under the same names
    separate: list[tuple[str, str, int, str | None]] = field(default_factory=list)

    def lines(self, shown: str) -> list[str]:
        """What the push did, for people: counts, and each document stored as a run of its own."""
        out = [f"pushed {self.documents} result documents to {shown}: {self.new} new, {self.present} already there"]
        for run_id, cell_id, repeat, host in self.separate:
            out.append(
                f"stored as a separate run: {run_id} {cell_id} r{repeat} on host {(host or '?')[:12]} differs from "
                "the stored document of that run id, cell, repeat and host (another night's run, a re-run): both kept"
            )
        return out


class Store:
    """An open store: ``with Store.open(url) as store: store.push(results)``."""

    def __init__(self, url: StoreURL, connection: Any) -> None:
        self.url = url
        self.db = connection
        self.dialect = url.scheme
        self.mark = "?" if self.dialect == "sqlite" else "%s"

    # ------------------------------------------------------------------ opening

    @classmethod
    @contextlib.contextmanager
    def open(cls, url: StoreURL, *, network_ok: bool = False) -> Iterator[Store]:
        """The store at ``url``, created (empty database) or migrated to this fsmatrix's schema.
        ``network_ok``: an SQLite file on a network filesystem is taken, without WAL (a results root's
        own store, which one `fsmatrix run` writes: a Slurm task's, on the shared directory); else refused."""
        connection = _sqlite(url, network_ok) if url.scheme == "sqlite" else _postgresql(url)
        store = cls(url, connection)
        try:
            store._prepare()
            yield store
        finally:
            connection.close()

    def _prepare(self) -> None:
        with self._transaction():
            if self.dialect == "postgresql":  # two pushers creating one store: one at a time
                self._execute("SELECT pg_advisory_xact_lock(1718382452)")
            tables = self._tables()
            found = self._version(tables)
            if found is None:
                if tables:
                    raise UserError(
                        f"store {self.url.shown}: a database that is not an fsmatrix store (it has tables "
                        f"{', '.join(sorted(tables)[:5])}); name an empty database or an fsmatrix store"
                    )
            elif found > schema.VERSION:
                raise UserError(
                    f"store {self.url.shown}: schema version {found}, newer than this fsmatrix's "
                    f"({schema.VERSION}); use a newer fsmatrix with it"
                )
            for statement in schema.migrations(self.dialect, found or 0):
                self._execute(statement)
            if found and found < schema.WORK_FROM_DOCUMENTS:
                self._fill_from_documents(found)

    def _fill_from_documents(self, found: int) -> None:
        """What the migrations from version ``found`` added, filled from the documents of the store,
        ``BATCH`` at a time (by id: the documents are never all in memory at once): version 2's columns,
        version 3's rows of the work metrics. In the migration's transaction: a migration stopped halfway
        leaves the store at its old version."""
        last = ""
        while rows := self._execute(
            "SELECT id, document FROM results WHERE id > ? ORDER BY id LIMIT ?", [last, BATCH]
        ).fetchall():
            filled, work = [], []
            for rid, stored in rows:
                try:
                    result = Result.read(_parsed(stored))
                except ValueError:  # checked when it was pushed: an older fsmatrix's that this one cannot read
                    continue
                filled.append((comparison_group(result.params, result.workload)[1], result.duration_s, rid))
                work += [(rid, *row) for row in metric_rows(result) if row[3] == schema.WORK]
            if found < schema.FILLED_FROM_DOCUMENTS:
                self._execute_many("UPDATE results SET comparison_label = ?, duration_s = ? WHERE id = ?", filled)
            self._execute_many(
                "INSERT INTO result_metrics (result_id, metric, value, direction, kind) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (result_id, metric) DO NOTHING",
                work,
            )
            last = str(rows[-1][0])

    def _tables(self) -> set[str]:
        if self.dialect == "sqlite":
            rows = self._execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        else:
            rows = self._execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            ).fetchall()
        return {str(r[0]) for r in rows if not str(r[0]).startswith("sqlite_")}

    def _version(self, tables: set[str]) -> int | None:
        if schema.META not in tables:
            return None
        row = self._execute(f"SELECT value FROM {schema.META} WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else None

    # ------------------------------------------------------------------ statements

    @contextlib.contextmanager
    def _reaching(self) -> Iterator[None]:
        """A store that fails under a statement (a server gone, a locked file past the busy timeout):
        one line, without the password."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            raise StoreUnreachable(f"store {self.url.shown}: {self.url.hide(str(exc))}") from None
        except Exception as exc:
            if not type(exc).__module__.startswith("psycopg"):
                raise
            if _is_connection_error(exc):
                raise StoreUnreachable(f"store {self.url.shown}: {self.url.hide(_first_line(exc))}") from None
            # Anything else the server refuses (a role that may not create tables, a full disk): one line.
            raise UserError(f"store {self.url.shown}: {self.url.hide(_first_line(exc))}") from None

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self._reaching():
            return self.db.execute(sql.replace("?", self.mark), tuple(params))

    def _execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        cursor = self.db.cursor()
        try:
            with self._reaching():
                cursor.executemany(sql.replace("?", self.mark), rows)
        finally:
            cursor.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One transaction: all of it or none of it (SQLite: taken for writing at once, so two pushers
        queue on the busy timeout instead of deadlocking on a lock upgrade)."""
        self._execute("BEGIN IMMEDIATE" if self.dialect == "sqlite" else "BEGIN")
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self.db.execute("ROLLBACK")
            raise
        self._execute("COMMIT")

    # ------------------------------------------------------------------ pushing

    def push(self, results: Sequence[Result], batch: int = BATCH) -> Pushed:
        """Store ``results``, ``batch`` documents a transaction (see the module's docstring)."""
        done = Pushed(documents=len(results))
        for start in range(0, len(results), batch):
            rows = [ResultColumns.of(r) for r in results[start : start + batch]]
            with self._transaction():
                self._push_rows(rows, done)
        return done

    def _push_rows(self, rows: list[ResultColumns], done: Pushed) -> None:
        ids = [r.id for r in rows]
        present = {
            str(r[0]) for r in self._execute(f"SELECT id FROM results WHERE id IN ({_marks(ids)})", ids).fetchall()
        }
        fresh = list({r.id: r for r in rows if r.id not in present}.values())  # a document twice in one push: once
        done.present += len(rows) - len(fresh)
        done.new += len(fresh)
        if not fresh:
            return
        run_ids = sorted({r.run_id for r in fresh})
        stored: dict[tuple[str, str, int, str | None], set[str]] = {}
        for run_id, cell_id, repeat, host, rid in self._execute(
            f"SELECT run_id, cell_id, repeat, host, id FROM results WHERE run_id IN ({_marks(run_ids)})", run_ids
        ).fetchall():
            stored.setdefault((run_id, cell_id, repeat, host), set()).add(rid)
        seen: set[tuple[str, str, int, str | None]] = set()
        for r in fresh:  # another document under a stored one's names, or under one earlier in this push
            key = (r.run_id, r.cell_id, r.repeat, r.host)
            if stored.get(key) or key in seen:
                done.separate.append(key)
            seen.add(key)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        document_type = "?" if self.dialect == "sqlite" else "?::jsonb"
        # ON CONFLICT: another pusher may have stored the same document since the SELECT above.
        self._execute_many(
            "INSERT INTO results (id, run_id, cell_id, repeat, host, status, workload, comparison_group, "
            "comparison_label, hardware_class, fsmatrix_commit, settings_sha256, kernel, image, backend, tools, "
            f"started_at, finished_at, duration_s, pushed_at, document) VALUES ({'?, ' * 20}{document_type}) "
            "ON CONFLICT (id) DO NOTHING",
            [
                (
                    r.id, r.run_id, r.cell_id, r.repeat, r.host, r.status, r.workload, r.comparison_group,
                    r.comparison_label, r.hardware_class, r.fsmatrix_commit, r.settings_sha256, r.kernel, r.image,
                    r.backend, r.tools, r.started_at, r.finished_at, r.duration_s, now, r.document,
                )
                for r in fresh
            ],
        )  # fmt: skip
        self._execute_many(
            "INSERT INTO result_metrics (result_id, metric, value, direction, kind) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (result_id, metric) DO NOTHING",
            [(r.id, *row) for r in fresh for row in r.metrics],
        )

    # ------------------------------------------------------------------ reading

    def count(self) -> int:
        return int(self._execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def index_rows(self, since: str | None = None) -> list[tuple[str, str | None, str, str | None, str | None]]:
        """(run id, host, cell id, started, finished) of every stored result started at or after
        ``since`` (ISO 8601), oldest first."""
        where, params = ("WHERE started_at >= ?", [since]) if since else ("", [])
        return [
            (str(r[0]), r[1], str(r[2]), r[3], r[4])
            for r in self._execute(
                f"SELECT run_id, host, cell_id, started_at, finished_at FROM results {where} "
                "ORDER BY started_at, run_id, cell_id",
                params,
            ).fetchall()
        ]

    def cell_runs(self, cell_id: str) -> list[tuple[str, str | None, int, str | None, str]]:
        """(run id, host, repeat, started, status) of one cell's stored results, oldest first."""
        return [
            (str(r[0]), r[1], int(r[2]), r[3], str(r[4]))
            for r in self._execute(
                "SELECT run_id, host, repeat, started_at, status FROM results WHERE cell_id = ? ORDER BY started_at",
                [cell_id],
            ).fetchall()
        ]

    def select(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of a query on the store's tables (``?`` for each parameter, in either database): for
        the store's own readers (``history.py``, ``root_store.py``), who know its schema."""
        return [tuple(r) for r in self._execute(sql, params).fetchall()]

    def results(self, ids: Collection[str]) -> dict[str, Result]:
        """The stored documents of these result ids, typed: only where a reader needs what no column has."""
        wanted = sorted(ids)
        found: dict[str, Result] = {}
        for start in range(0, len(wanted), BATCH):
            chunk = wanted[start : start + BATCH]
            for rid, stored in self.select(f"SELECT id, document FROM results WHERE id IN ({_marks(chunk)})", chunk):
                found[str(rid)] = Result.read(_parsed(stored))
        return found

    def parameters(self, ids: Collection[str]) -> dict[str, Any]:
        """The cell parameters (``params``) of these results' documents, by id, without parsing the rest
        of each document (the estimates read a few hundred)."""
        field = "json_extract(document, '$.params')" if self.dialect == "sqlite" else "document->'params'"
        wanted = sorted(ids)
        found: dict[str, Any] = {}
        for start in range(0, len(wanted), BATCH):
            chunk = wanted[start : start + BATCH]
            for rid, params in self.select(f"SELECT id, {field} FROM results WHERE id IN ({_marks(chunk)})", chunk):
                found[str(rid)] = json.loads(params) if isinstance(params, str) else params
        return found


def _parsed(stored: str | Mapping[str, Any]) -> Mapping[str, Any]:
    """A stored document as JSON: SQLite keeps text, PostgreSQL's JSONB comes parsed."""
    return json.loads(stored) if isinstance(stored, str) else stored


def _marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


def _sqlite(url: StoreURL, network_ok: bool = False) -> sqlite3.Connection:
    path = url.path
    remote = network_filesystem(path)
    if remote is not None and not network_ok:
        check_local(path)  # refused, in one line
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreUnreachable(f"store {url.shown}: cannot make its folder {path.parent}: {exc.strerror}") from None
    try:
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        # another program's database stays as it is (_prepare refuses it); WAL's shared memory needs one
        # machine's processes, which a network filesystem does not promise
        if (not tables or schema.META in tables) and remote is None:
            db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA foreign_keys = ON")
    except sqlite3.OperationalError as exc:  # cannot open it (a folder, no permission) or locked
        raise StoreUnreachable(f"store {url.shown}: cannot open it ({exc})") from None
    except sqlite3.DatabaseError as exc:
        raise UserError(f"store {url.shown}: not an SQLite database ({exc})") from None
    return db


def _postgresql(url: StoreURL) -> Any:
    import psycopg  # only where a PostgreSQL store is named

    try:
        return psycopg.connect(url.target, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.OperationalError as exc:
        raise StoreUnreachable(f"store {url.shown}: cannot connect: {url.hide(_first_line(exc))}") from None
    except psycopg.ProgrammingError as exc:  # a URL libpq cannot read
        raise UserError(f"store {url.shown}: {url.hide(_first_line(exc))}") from None


def _is_connection_error(exc: Exception) -> bool:
    import psycopg

    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
