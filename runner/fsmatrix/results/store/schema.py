"""The store's schema, one for SQLite and PostgreSQL, as versioned SQL the store applies itself.

Why not alembic: the schema is a few tables that fsmatrix alone writes; versioned statements in one
list, applied in one transaction with the version recorded beside them, need no second tool, no
SQLAlchemy models and no migration environment, and read the same for both databases (the two
dialects differ in two column types). A store records its version (``fsmatrix_store``); a newer one
than ``VERSION`` is refused, an older one is brought up to date by the statements after its version.

Columns: what history and the estimates query, typed; the whole document beside them (JSONB in
PostgreSQL, text in SQLite), read only where no column says it (what changed at a change point). ``results.id``
is the document's content hash (database.content_id). The key metrics of each result are rows of
``result_metrics`` (a series is one cell's metric over time).

Version 2 adds what history and the estimates read from documents before: the comparison group's label
(``comparison_label``), the run's ``duration_s``, and an index on the metric (``--metric``). A store of
version 1 gets the columns filled from its documents in the same transaction (``database.Store``:
the label needs the cell parsed, which SQL cannot do).

Version 3 makes the work per operation series too (the agent's ``WORK_METRICS``: device bytes and IOs,
flushes, fsyncs, instructions, cycles, context switches per operation): they are rows of
``result_metrics`` beside the key metrics, told apart by ``kind`` (``key`` or ``work``; a work metric
the document also declares key is one row, ``key``). Only measured values are rows: a metric that is
null (its reason in the document's ``metrics_unavailable``) is never a point. A store of version 2 or
older gets the rows of its documents' work metrics in the same transaction (``database.Store``).
"""

from __future__ import annotations

META = "fsmatrix_store"
VERSION = 3


def _types(dialect: str) -> dict[str, str]:
    if dialect == "sqlite":
        return {"json": "TEXT", "real": "REAL"}
    return {"json": "JSONB", "real": "DOUBLE PRECISION"}


def _version_1(dialect: str) -> list[str]:
    t = _types(dialect)
    return [
        f"CREATE TABLE {META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE results (
             id TEXT PRIMARY KEY,
             run_id TEXT NOT NULL,
             cell_id TEXT NOT NULL,
             repeat INTEGER NOT NULL,
             host TEXT,
             status TEXT NOT NULL,
             workload TEXT NOT NULL,
             comparison_group TEXT NOT NULL,
             hardware_class TEXT NOT NULL,
             fsmatrix_commit TEXT,
             settings_sha256 TEXT,
             kernel TEXT,
             image TEXT,
             backend TEXT,
             tools TEXT NOT NULL,
             started_at TEXT,
             finished_at TEXT,
             pushed_at TEXT NOT NULL,
             document """
        + t["json"]
        + " NOT NULL)",
        "CREATE INDEX results_cell ON results (cell_id, started_at)",
        "CREATE INDEX results_run ON results (run_id, cell_id, repeat, host)",
        "CREATE INDEX results_started ON results (started_at)",
        f"""CREATE TABLE result_metrics (
             result_id TEXT NOT NULL REFERENCES results (id),
             metric TEXT NOT NULL,
             value {t["real"]} NOT NULL,
             direction TEXT NOT NULL,
             PRIMARY KEY (result_id, metric))""",
    ]


def _version_2(dialect: str) -> list[str]:
    t = _types(dialect)
    return [
        # NOT NULL needs a default for the rows already there; a version-1 store's are filled after
        "ALTER TABLE results ADD COLUMN comparison_label TEXT NOT NULL DEFAULT ''",
        f"ALTER TABLE results ADD COLUMN duration_s {t['real']}",
        "CREATE INDEX result_metrics_metric ON result_metrics (metric)",
    ]


def _version_3(dialect: str) -> list[str]:
    # the rows already there are the key metrics; the work metrics' rows are added from the documents after
    return ["ALTER TABLE result_metrics ADD COLUMN kind TEXT NOT NULL DEFAULT 'key'"]


# version -> the statements that bring a store from the version before it to this one
MIGRATIONS = {1: _version_1, 2: _version_2, 3: _version_3}

# A store older than this version has its comparison labels and durations filled from its documents.
FILLED_FROM_DOCUMENTS = 2
# A store older than this version has the rows of its documents' work metrics added from its documents.
WORK_FROM_DOCUMENTS = 3
KEY, WORK = "key", "work"  # result_metrics.kind


def migrations(dialect: str, found: int) -> list[str]:
    """The statements that bring a store at version ``found`` (0: empty) to ``VERSION``, each
    version's followed by recording it."""
    statements: list[str] = []
    for version in range(found + 1, VERSION + 1):
        statements += MIGRATIONS[version](dialect)
        if version == 1:
            statements.append(f"INSERT INTO {META} (key, value) VALUES ('schema_version', '1')")
        else:
            statements.append(f"UPDATE {META} SET value = '{version}' WHERE key = 'schema_version'")
    return statements
