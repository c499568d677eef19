"""Results for other tools: a CSV of every run, and Apache Otava's CSV with its test definition."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from datetime import datetime

import yaml

from fsmatrix.matrix import flatten
from fsmatrix.results.store import Result
from fsmatrix.results.verdict import stats


def runs_csv(docs: list[Result]) -> str:
    """One row per run: identity, status, the cell's parameters (flattened) and every metric."""
    fixed = ["run_id", "cell_id", "repeat", "status", "workload", "started_at", "duration_s", "git_sha"]
    param_keys: list[str] = []
    metric_keys: list[str] = []
    for doc in docs:
        for key in flatten(doc.params):
            if key not in param_keys:
                param_keys.append(key)
        for key in doc.metrics:
            if key not in metric_keys:
                metric_keys.append(key)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(fixed + [f"param.{k}" for k in param_keys] + metric_keys)
    for doc in sorted(docs, key=lambda d: (str(d.run_id), d.cell_id, d.repeat)):
        flat = flatten(doc.params)
        sha = doc.provenance.git_sha or ""
        row = [doc.run_id, doc.cell_id, doc.repeat, doc.status, doc.workload]
        row += [doc.started_at or "", "" if doc.duration_s is None else doc.duration_s, sha]
        row += [flat.get(k, "") for k in param_keys]
        row += [doc.metrics.get(k, "") for k in metric_keys]
        writer.writerow(row)
    return buf.getvalue()


def otava_csv(docs: list[Result]) -> str:
    """Apache Otava's CSV input: one row per run id (a point in history, by its start time), a ``time``
    column, ``commit`` and ``run_id`` attributes, and one column per cell and key metric
    (``<cell id>.<metric>``) holding the median of that run's passed repeats."""
    by_run: dict[str, list[Result]] = defaultdict(list)
    for doc in docs:
        by_run[doc.run_id].append(doc)
    columns: list[str] = []
    points = []
    for run_id, run_docs in by_run.items():
        started = min(d.started_at or "" for d in run_docs)
        sha = next((d.provenance.git_sha for d in run_docs), None) or ""
        values: dict[str, list[float]] = defaultdict(list)
        for doc in run_docs:
            if doc.status != "passed":
                continue
            for metric in doc.key_metrics:
                value = doc.metrics.get(metric)
                if isinstance(value, int | float):
                    values[f"{doc.cell_id}.{metric}"].append(float(value))
        for name in values:
            if name not in columns:
                columns.append(name)
        points.append((started, sha, run_id, {k: stats.median(v) for k, v in values.items()}))
    points.sort(key=lambda p: p[0])
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["time", "commit", "run_id", *sorted(columns)])
    for started, sha, run_id, medians in points:
        writer.writerow([_otava_time(started), sha, run_id, *(medians.get(c, "") for c in sorted(columns))])
    return buf.getvalue()


def otava_config(docs: list[Result], csv_file: str, test: str = "fsmatrix") -> str:
    """An Otava configuration (``tests:`` section) reading what otava_csv wrote to ``csv_file``, every
    metric with its direction (Otava: 1 when higher is better, -1 when lower is better)."""
    directions: dict[str, str] = {}
    for doc in docs:
        for metric, direction in doc.key_metrics.items():
            directions.setdefault(f"{doc.cell_id}.{metric}", direction)
    metrics = {name: {"direction": 1 if d == "higher" else -1} for name, d in sorted(directions.items())}
    config = {
        "tests": {
            test: {
                "type": "csv",
                "file": csv_file,
                "time_column": "time",
                "attributes": ["commit", "run_id"],
                "metrics": metrics,
                "csv_options": {"delimiter": ",", "quote_char": '"'},
            }
        }
    }
    return str(yaml.safe_dump(config, sort_keys=False))


def _otava_time(iso: str) -> str:
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S %z")
    except ValueError:
        return iso
