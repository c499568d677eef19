"""The store's schema, one for SQLite and PostgreSQL, as versioned SQL the store applies itself.

Why not alembic: the schema is a few tables that fsmatrix alone writes; versioned statements in one
list, applied in one transaction with the version recorded beside them, need no second tool, no
SQLAlchemy models and no migration environment, and read the same for both databases (the two
dialects differ in two column types). A store records its version (``fsmatrix_store``); a newer one
than ``VERSION`` is refused, an older one is brought up to date by the statements after its version.

Columns: a document's identity and provenance, typed, for SQL over the store; fsmatrix itself reads
the run, cell, repeat, host, status and times (``results list``, one cell's runs, a push's duplicates)
and keeps the rest for whoever queries the store. The whole document beside them (JSONB in
PostgreSQL, text in SQLite) is what ``fsmatrix history`` reads: every passed result's (``status``,
``started_at`` since ``--since``), typed again. ``results.id`` is the document's content hash
(database.content_id). The key metrics of each result are rows of ``result_metrics``: history's
values (a series is one cell's metric over time).
"""

from __future__ import annotations

META = "fsmatrix_store"
VERSION = 1


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


# version -> the statements that bring a store from the version before it to this one
MIGRATIONS = {1: _version_1}


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
