"""The seeds' published tables and claims, as data (``matrix/seeds/published/``).

- ``NNN.csv``: one value per line, ``seed,table,row,column,value,unit`` (the table id is
  ``SEED/TABLE``, e.g. ``000/elapsed``);
- ``tables.yml``: per table, its title, the fsmatrix workload and metric that measure the same
  thing, how the seed presents it, and how a result cell's settings map onto its rows and columns;
- ``claims.yml``: each seed's qualitative claims in a small language (``best``, ``worst``,
  ``better``, ``order``), checked by ``verdict/claims.py`` against results.

Everything is validated on loading (a claim naming a row, column or table that does not exist is an
error), so a typo in the data fails ``make test`` instead of a report.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fsmatrix.agent import workloads
from fsmatrix.errors import UserError
from fsmatrix.results.store.document import Result
from fsmatrix.results.store.records import load_run_matrix

DEFAULT_DIR = Path(__file__).resolve().parents[4] / "matrix" / "seeds" / "published"
CSV_COLUMNS = ("seed", "table", "row", "column", "value", "unit")
SERIES = ("row", "column")
CLAIM_KINDS = ("best", "worst", "better", "order")


@dataclass(frozen=True)
class Table:
    """One published table: its values and how results map onto it."""

    id: str  # "000/elapsed"
    title: str
    source: str
    workload: str
    metrics: dict[str, str]  # column label -> metric; {"": metric} when one metric serves every column
    series: str  # "row": entries of a row are compared; "column": entries of a column
    present: str  # "times_best" or "relative_to"
    baseline: str | None  # the entry ``relative_to`` names
    rows: dict[str, dict[str, Any] | None] | str  # label -> selector (None: not measurable), or a setting
    columns: dict[str, dict[str, Any] | None] | str
    extra_labels: dict[str, tuple[str, ...]]  # "rows"/"columns" -> labels of a setting axis with no published value
    where: dict[str, Any]
    compare: bool
    normalised: bool
    note: str
    values: dict[tuple[str, str], float] = field(default_factory=dict)  # (row, column) -> value
    units: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def seed(self) -> str:
        return self.id.partition("/")[0]

    def metric_for(self, column: str) -> str:
        return self.metrics.get(column, self.metrics.get("", ""))

    def direction(self, column: str) -> str:
        """ "lower" or "higher": which values of this column's metric are better."""
        metric = self.metric_for(column)
        for m in workloads.get(self.workload).metrics:
            if m.name == metric:
                return m.better
        raise UserError(f"table {self.id}: workload {self.workload} has no metric {metric!r}")

    def row_labels(self) -> list[str]:
        return _labels(self.rows, [r for r, _ in self.values], self.extra_labels.get("rows", ()))

    def column_labels(self) -> list[str]:
        return _labels(self.columns, [c for _, c in self.values], self.extra_labels.get("columns", ()))

    def series_labels(self) -> list[str]:
        return self.row_labels() if self.series == "row" else self.column_labels()

    def entry_labels(self) -> list[str]:
        return self.column_labels() if self.series == "row" else self.row_labels()

    def cell(self, series: str, entry: str) -> tuple[str, str]:
        """(row, column) of ENTRY in SERIES."""
        return (series, entry) if self.series == "row" else (entry, series)


def _labels(axis: dict[str, Any] | str, published: list[str], extra: tuple[str, ...]) -> list[str]:
    labels = list(axis) if isinstance(axis, dict) else []
    return list(dict.fromkeys([*labels, *published, *extra]))


@dataclass(frozen=True)
class Claim:
    """One checkable statement: ``kind`` over ``cells`` ((row, column) pairs) of ``table``."""

    id: str
    seed: str
    says: str
    text: str  # as written in claims.yml
    kind: str  # best, worst, better, order
    table: str
    series: str | None  # best/worst/order
    entries: tuple[str, ...]  # best/worst: (ENTRY, *among); order: the chain; better: ()
    cells: tuple[tuple[str, str], ...]  # better: the two cells
    by: float | None  # better: the factor it must reach


@dataclass
class Published:
    tables: dict[str, Table]
    claims: list[Claim]


# --------------------------------------------------------------------------------------- claims

_CALL = re.compile(r"^\s*(\w+)\s*\((.*)\)\s*$", re.S)
_AMONG = re.compile(r"^among\s*=\s*\[(.*)\]$", re.S)
_BY = re.compile(r"^by\s*>=\s*([0-9]+(?:\.[0-9]+)?)$")


def _split_args(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return parts


def parse_claim(text: str, tables: dict[str, Table], *, claim_id: str = "", seed: str = "", says: str = "") -> Claim:
    """Parse one claim and check every table, row and column it names exists. Raises UserError."""
    where = f"claim {claim_id or text!r}"
    m = _CALL.match(text)
    if not m:
        raise UserError(f"{where}: expected KIND(TABLE, ...) with KIND one of {', '.join(CLAIM_KINDS)}")
    kind, args = m.group(1), _split_args(m.group(2))
    if kind not in CLAIM_KINDS:
        raise UserError(f"{where}: unknown kind {kind!r}; expected one of {', '.join(CLAIM_KINDS)}")
    if len(args) < 3:
        raise UserError(f"{where}: {kind} needs a table and at least two more arguments")
    table_id = args[0]
    if table_id not in tables:
        raise UserError(f"{where}: no table {table_id!r}; tables: {', '.join(tables)}")
    table = tables[table_id]
    if not table.compare:
        raise UserError(f"{where}: table {table_id} is data only (compare: false); claims cannot use it")
    rows, columns = table.row_labels(), table.column_labels()

    def check_cell(ref: str) -> tuple[str, str]:
        row, sep, col = ref.partition(":")
        if not sep:
            raise UserError(f"{where}: {ref!r} is not ROW:COLUMN")
        if row not in rows:
            raise UserError(f"{where}: table {table_id} has no row {row!r}; rows: {', '.join(rows)}")
        if col not in columns:
            raise UserError(f"{where}: table {table_id} has no column {col!r}; columns: {', '.join(columns)}")
        return row, col

    def check_series(label: str) -> str:
        labels = table.series_labels()
        if label not in labels:
            axis = table.series
            raise UserError(f"{where}: table {table_id} has no {axis} {label!r}; {axis}s: {', '.join(labels)}")
        return label

    def check_entry(label: str) -> str:
        labels = table.entry_labels()
        if label not in labels:
            axis = "column" if table.series == "row" else "row"
            raise UserError(f"{where}: table {table_id} has no {axis} {label!r}; {axis}s: {', '.join(labels)}")
        return label

    if kind == "better":
        if len(args) not in (3, 4):
            raise UserError(f"{where}: better(TABLE, ROW:COL, ROW:COL[, by>=X]) takes 3 or 4 arguments")
        a, b = check_cell(args[1]), check_cell(args[2])
        if a == b:
            raise UserError(f"{where}: compares {args[1]} with itself")
        by = None
        if len(args) == 4:
            bm = _BY.match(args[3])
            if not bm or float(bm.group(1)) < 1:
                raise UserError(f"{where}: {args[3]!r} should be by>=X with X a number >= 1")
            by = float(bm.group(1))
        if table.direction(a[1]) != table.direction(b[1]):
            raise UserError(f"{where}: {args[1]} and {args[2]} are metrics with opposite directions")
        return Claim(claim_id, seed, says, text, kind, table_id, None, (), (a, b), by)
    series = check_series(args[1])
    if kind == "order":
        if len(args) != 3:
            raise UserError(f"{where}: order(TABLE, SERIES, A > B > ...) takes 3 arguments")
        chain = tuple(check_entry(e.strip()) for e in args[2].split(">"))
        if len(chain) < 2 or len(set(chain)) != len(chain):
            raise UserError(f"{where}: the order needs two or more different entries separated by '>'")
        return Claim(claim_id, seed, says, text, kind, table_id, series, chain, (), None)
    # best / worst
    if len(args) not in (3, 4):
        raise UserError(f"{where}: {kind}(TABLE, SERIES, ENTRY[, among=[...]]) takes 3 or 4 arguments")
    entry = check_entry(args[2])
    among: tuple[str, ...] = ()
    if len(args) == 4:
        am = _AMONG.match(args[3])
        if not am:
            raise UserError(f"{where}: {args[3]!r} should be among=[ENTRY, ...]")
        among = tuple(check_entry(e.strip()) for e in am.group(1).split(",") if e.strip())
        if not among:
            raise UserError(f"{where}: among=[] names no entry")
    return Claim(claim_id, seed, says, text, kind, table_id, series, (entry, *among), (), None)


# --------------------------------------------------------------------------------------- loading


def _fail(path: Path, message: str) -> UserError:
    return UserError(message, file=str(path))


def _extra_labels(value: Any) -> tuple[str, ...]:
    if isinstance(value, dict) and set(value) == {"param", "labels"} and isinstance(value["labels"], list):
        return tuple(str(v) for v in value["labels"])
    return ()


def _selector_axis(value: Any, path: Path, where: str) -> dict[str, dict[str, Any] | None] | str:
    if isinstance(value, dict) and set(value) in ({"param"}, {"param", "labels"}) and isinstance(value["param"], str):
        if "labels" in value and not isinstance(value["labels"], list):
            raise _fail(path, f"{where}: labels must be a list")
        return str(value["param"])
    if isinstance(value, dict) and all(isinstance(v, dict) or v is None for v in value.values()):
        return {str(k): v for k, v in value.items()}
    raise _fail(path, f"{where}: expected {{param: SETTING}} or a mapping label -> settings (or null)")


def _table(table_id: str, doc: Any, path: Path) -> Table:
    where = f"table {table_id}"
    if not isinstance(doc, dict):
        raise _fail(path, f"{where}: expected a mapping")
    known = {
        "title", "source", "workload", "metric", "metrics", "series", "present", "rows", "columns",
        "where", "compare", "normalised", "note",
    }  # fmt: skip
    unknown = set(doc) - known
    if unknown:
        raise _fail(path, f"{where}: unknown keys {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(known))}")
    if not re.fullmatch(r"\d{3}/[a-z0-9_]+", table_id):
        raise _fail(path, f"{where}: an id is SEED/TABLE (three digits, then lower-case letters, digits, _)")
    workload = doc.get("workload")
    if workload not in workloads.WORKLOADS:
        raise _fail(path, f"{where}: workload {workload!r}; expected one of {', '.join(workloads.WORKLOADS)}")
    declared = {m.name for m in workloads.get(workload).metrics}
    if ("metric" in doc) == ("metrics" in doc):
        raise _fail(path, f"{where}: give exactly one of metric (one for the table) or metrics (per column)")
    metrics = {"": doc["metric"]} if "metric" in doc else dict(doc["metrics"] or {})
    for metric in metrics.values():
        if metric not in declared:
            raise _fail(path, f"{where}: {workload} has no metric {metric!r}; it has {', '.join(sorted(declared))}")
    series = doc.get("series")
    if series not in SERIES:
        raise _fail(path, f"{where}: series {series!r}; expected row or column")
    shown, baseline = doc.get("present"), None
    if isinstance(shown, dict) and set(shown) == {"relative_to"}:
        present, baseline = "relative_to", str(shown["relative_to"])
    elif shown == "times_best":
        present = "times_best"
    else:
        raise _fail(path, f"{where}: present {shown!r}; expected times_best or {{relative_to: ENTRY}}")
    if "rows" not in doc:
        raise _fail(path, f"{where}: rows is required")
    rows = _selector_axis(doc["rows"], path, f"{where}: rows")
    columns: dict[str, dict[str, Any] | None] | str
    if "metrics" in doc:
        if "columns" in doc:
            raise _fail(path, f"{where}: with metrics, the columns are the metrics' labels")
        columns = {label: {} for label in metrics}
    else:
        if "columns" not in doc:
            raise _fail(path, f"{where}: columns is required")
        columns = _selector_axis(doc["columns"], path, f"{where}: columns")
    where_ = doc.get("where") or {}
    if not isinstance(where_, dict):
        raise _fail(path, f"{where}: where must be a mapping of settings")
    return Table(
        id=table_id,
        title=str(doc.get("title", table_id)),
        source=str(doc.get("source", "")),
        workload=workload,
        metrics={str(k): str(v) for k, v in metrics.items()},
        series=series,
        present=present,
        baseline=baseline,
        rows=rows,
        columns=columns,
        extra_labels={"rows": _extra_labels(doc["rows"]), "columns": _extra_labels(doc.get("columns"))},
        where=dict(where_),
        compare=bool(doc.get("compare", True)),
        normalised=bool(doc.get("normalised", False)),
        note=str(doc.get("note", "")),
    )


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _fail(path, f"cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise _fail(path, f"not valid YAML: {exc}") from exc


def _read_csv(path: Path, tables: dict[str, Table]) -> None:
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if tuple(header or ()) != CSV_COLUMNS:
                raise _fail(path, f"header {header!r}; expected {','.join(CSV_COLUMNS)}")
            for number, record in enumerate(reader, start=2):
                if not record:
                    continue
                if len(record) != len(CSV_COLUMNS):
                    raise UserError(f"{len(record)} fields; expected {len(CSV_COLUMNS)}", file=str(path), line=number)
                seed, name, row, column, value, unit = (x.strip() for x in record)
                table_id = f"{seed}/{name}"
                if table_id not in tables:
                    raise UserError(f"table {table_id} is not in tables.yml", file=str(path), line=number)
                try:
                    number_value = float(value.replace(",", ""))
                except ValueError:
                    raise UserError(f"value {value!r} is not a number", file=str(path), line=number) from None
                table = tables[table_id]
                for axis, label in (("rows", row), ("columns", column)):
                    labels = getattr(table, axis)
                    if isinstance(labels, dict) and label not in labels:
                        raise UserError(
                            f"table {table_id} has no {axis[:-1]} {label!r} in tables.yml ({', '.join(labels)})",
                            file=str(path),
                            line=number,
                        )
                if (row, column) in table.values:
                    raise UserError(f"{table_id} {row}:{column} is given twice", file=str(path), line=number)
                table.values[(row, column)] = number_value
                table.units[(row, column)] = unit
    except OSError as exc:
        raise _fail(path, f"cannot read: {exc.strerror}") from exc


def load(directory: Path = DEFAULT_DIR) -> Published:
    """The published tables (with their values) and the parsed claims. Raises UserError on any error."""
    tables_path, claims_path = directory / "tables.yml", directory / "claims.yml"
    doc = _read_yaml(tables_path)
    if not isinstance(doc, dict) or not isinstance(doc.get("tables"), dict):
        raise _fail(tables_path, "expected a mapping with 'tables'")
    tables = {str(tid): _table(str(tid), t, tables_path) for tid, t in doc["tables"].items()}
    csvs = sorted(directory.glob("*.csv"))
    if not csvs:
        raise _fail(directory, "no published tables (*.csv)")
    for path in csvs:
        _read_csv(path, tables)
    for table in tables.values():
        if not table.values:
            raise _fail(tables_path, f"table {table.id} has no values in any CSV")
        if table.baseline is not None and table.baseline not in table.entry_labels():
            raise _fail(tables_path, f"table {table.id}: relative_to {table.baseline!r} is not one of its entries")
    cdoc = _read_yaml(claims_path)
    if not isinstance(cdoc, dict) or not isinstance(cdoc.get("claims"), list):
        raise _fail(claims_path, "expected a mapping with a list 'claims'")
    claims, seen = [], set()
    for item in cdoc["claims"]:
        if not isinstance(item, dict) or not {"id", "claim"} <= set(item):
            raise _fail(claims_path, f"each claim needs id and claim: {item!r}")
        if item["id"] in seen:
            raise _fail(claims_path, f"claim id {item['id']!r} is used twice")
        seen.add(item["id"])
        seed, says = str(item.get("seed", "")), str(item.get("says", ""))
        claim = parse_claim(str(item["claim"]), tables, claim_id=str(item["id"]), seed=seed, says=says)
        if claim.seed and claim.seed != tables[claim.table].seed:
            raise _fail(claims_path, f"claim {claim.id}: seed {claim.seed} but table {claim.table}")
        claims.append(claim)
    return Published(tables, claims)


def reproduced(docs: Sequence[Result]) -> list[dict[str, Any]]:
    """The ``reproduces`` entries of the matrix files these results were run from (every scale's:
    a stand-in maps one scale's input and never matches another's cells), merged per table."""
    files: set[Path] = set()
    # Each run folder's record once (not once per document: a report of 300 runs read it 300 times).
    for run_dir in sorted({doc.path.parent.parent for doc in docs if doc.path is not None}):
        matrix = load_run_matrix(run_dir) if (run_dir / "matrix.json").is_file() else None
        if matrix is not None and matrix.file:
            files.add(Path(matrix.file))
    merged: dict[str, dict[str, Any]] = {}
    for path in sorted(files):
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(doc, dict):
            continue
        entries = list(doc.get("reproduces") or [])
        for scale in (doc.get("scales") or {}).values():
            if isinstance(scale, dict):
                entries += list(scale.get("reproduces") or [])
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("table"), str):
                continue
            into = merged.setdefault(entry["table"], {"table": entry["table"], "stand_in": []})
            for item in entry.get("stand_in") or []:
                if item not in into["stand_in"]:
                    into["stand_in"].append(item)
    return list(merged.values())
