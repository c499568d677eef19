"""``fsmatrix history`` over a store of many documents, this tree's code against an older commit's:
``python -m fsmatrix.bench.history --store-documents N [--store-cells C] [--against COMMIT] [--repeats R]``
(``bench/history.py`` parses the options; this module measures).

Each side (``after``: this tree; ``before``: ``--against``'s ``runner/``, from ``git archive``) makes a
store of its own with its own code, an SQLite file of ``--store-documents`` result documents (an older
fsmatrix refuses a store of a newer schema): ``--store-cells`` cells of the real host-backend results
under tests/data/goldens, one run a night for as many nights as it takes, each document a real one
under a new cell id, run id and start time, its float metrics seeded (3 % noise, a step of 20 % every
fifth of the nights, the guest kernel changing with each step: change points, each attributed). The
same seed makes the same documents on both sides.

Then, ``--repeats`` times, alternating the sides (the side going first swaps every repetition, so that
a busy spell of a shared machine falls on both), each in a fresh process on its tree's code:

- **history**: ``fsmatrix history --store sqlite:///STORE --format json``, the whole command (start-up,
  reading the store, Otava in its virtualenv, the attribution, the JSON), wall clock;
- **load**: ``load_series(store)`` alone, the store opened (what the columns change), timed inside.

Both sides' JSON is compared byte for byte (it must not differ), each without the work series and the
series' ``kind`` (``comparable``): a commit before schema version 3 has neither. Last, ``--repeats`` times, this
tree's code opens a copy of the before side's store (schema version 1 for a commit before issue 46):
the migration to version 2, its columns filled from the documents.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fsmatrix.bench import results as bench_results
from fsmatrix.results.store import url as store_urls

CELLS = 100
SEED = 46
DOCUMENTS_PER_PUSH = 500

# Run by each side's interpreter with that side's fsmatrix first on the path: only what both have
# (Result.read, Store.open and push, url.parse; history.load_series(store)).
BUILD = r"""
import json, random, sys, time
from datetime import datetime, timedelta, timezone
from fsmatrix.results.store import Result, database
from fsmatrix.results.store import url as store_urls

made_from, path, documents, cells, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
templates = json.load(open(made_from))
rng = random.Random(seed)
nights = -(-documents // cells)
start = datetime(2026, 1, 1, tzinfo=timezone.utc)
t0 = time.perf_counter()
with database.Store.open(store_urls.parse("sqlite:///" + path)) as store:
    batch = []
    for i in range(documents):
        night, cell = divmod(i, cells)
        t = templates[cell % len(templates)]
        step = night * 5 // nights
        when = start + timedelta(hours=night)
        doc = dict(t)
        scaled = {k: v * 1.2**step * rng.gauss(1, 0.03) if isinstance(v, float) else v for k, v in t["metrics"].items()}
        doc.update(
            cell_id=f"{t['cell_id']}-{cell:04d}", run_id=f"night-{night:05d}", repeat=1,
            started_at=when.isoformat(), finished_at=(when + timedelta(seconds=60)).isoformat(),
            metrics=scaled,
            provenance={**t["provenance"], "kernel": f"6.{step}.0-bench"},
        )
        batch.append(Result.read(doc))
        if len(batch) == int(sys.argv[6]):
            store.push(batch)
            batch = []
    store.push(batch)
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""

LOAD = r"""
import json, sys, time
from fsmatrix.results.store import database, history
from fsmatrix.results.store import url as store_urls

t0 = time.perf_counter()
with database.Store.open(store_urls.parse("sqlite:///" + sys.argv[1])) as store:
    series = history.load_series(store)
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "series": len(series), "points": sum(len(s.points) for s in series)}))
"""

MIGRATE = r"""
import json, sys, time
from fsmatrix.results.store import database
from fsmatrix.results.store import url as store_urls

t0 = time.perf_counter()
with database.Store.open(store_urls.parse("sqlite:///" + sys.argv[1])) as store:
    count = store.count()
print(json.dumps({"seconds": time.perf_counter() - t0, "documents": count}))
"""


@dataclass
class Side:
    """One side's code (a tree's ``runner/``) and its store."""

    name: str
    runner: Path
    store: Path
    build_s: float = 0.0
    history_s: list[float] = field(default_factory=list)
    load_s: list[float] = field(default_factory=list)
    output: str = ""  # its `fsmatrix history --format json`
    loaded: dict[str, int] = field(default_factory=dict)  # series and points load_series returned

    def env(self) -> dict[str, str]:
        kept = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", store_urls.ENV)}
        return kept | {"PYTHONPATH": str(self.runner)}

    def python(self, code: str, *args: str) -> dict[str, Any]:
        """``code`` run by this side's interpreter on its fsmatrix; what it printed last, as JSON."""
        done = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, env=self.env(), check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} ({self.runner}): exit {done.returncode}: {done.stderr[-2000:]}")
        reply: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return reply


def build(side: Side, made_from: Path, documents: int, cells: int) -> None:
    side.build_s = float(
        side.python(
            BUILD, str(made_from), str(side.store), str(documents), str(cells), str(SEED), str(DOCUMENTS_PER_PUSH)
        )["seconds"]
    )


def comparable(output: str) -> str:
    """`fsmatrix history`'s JSON without the work series and the series' ``kind`` (schema version 3's)."""
    doc = json.loads(output)
    doc["series"] = [s for s in doc["series"] if s.pop("kind", "key") == "key"]
    return json.dumps(doc, indent=1)


def history_once(side: Side) -> None:
    """`fsmatrix history` on the side's store, as a user runs it: its wall clock and its JSON."""
    command = [sys.executable, "-m", "fsmatrix", "history", "--store", f"sqlite:///{side.store}", "--format", "json"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=side.env(), check=False)
    side.history_s.append(time.perf_counter() - started)
    if done.returncode != 0:
        raise RuntimeError(f"{side.name}: fsmatrix history: exit {done.returncode}: {done.stderr[-2000:]}")
    side.output = done.stdout


def load_once(side: Side) -> None:
    reply = side.python(LOAD, str(side.store))
    side.load_s.append(float(reply["seconds"]))
    side.loaded = {"series": int(reply["series"]), "points": int(reply["points"])}


def migrations(before: Side, after: Side, repeats: int, work: Path) -> list[float]:
    """Seconds for this tree's code to open a copy of the before side's store: its migration."""
    seconds = []
    for _ in range(repeats):
        copy = work / "migrated.sqlite"
        shutil.copyfile(before.store, copy)
        migrated = Side("migration", after.runner, copy)
        seconds.append(float(migrated.python(MIGRATE, str(copy))["seconds"]))
        copy.unlink()
    return seconds


def measure(documents: int, cells: int, repeats: int, against: str | None) -> dict[str, Any]:
    """The store benchmark (the module's docstring): built, timed, compared; what it found."""
    started = time.monotonic()
    meta: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="minutes"),
        "commit": bench_results.this_commit(),
    }
    meta |= {"documents": documents, "cells": cells, "repeats": repeats, "load_before": bench_results.load_average()}
    with tempfile.TemporaryDirectory(prefix="fsmatrix-bench-history-") as tmp:
        work = Path(tmp)
        sides = [Side("after", bench_results.RUNNER, work / "after.sqlite")]
        if against is not None:
            sha = bench_results.resolve(against)
            meta["before"] = f"{sha} (--against {against})"
            (work / "before").mkdir()
            sides.insert(0, Side("before", bench_results.extract_runner(sha, work / "before"), work / "before.sqlite"))
        made_from = work / "templates.json"
        made_from.write_text(json.dumps([t.docs[0] for t in bench_results.templates()]))
        for side in sides:
            build(side, made_from, documents, cells)
        for r in range(repeats):
            for side in sides if r % 2 == 0 else sides[::-1]:
                history_once(side)
                load_once(side)
        migrated = migrations(sides[0], sides[-1], repeats, work) if against is not None else []
        meta["store_mb"] = {s.name: round(s.store.stat().st_size / 2**20) for s in sides}
    meta |= {"load_after": bench_results.load_average(), "elapsed_s": round(time.monotonic() - started)}
    return to_json(meta, sides, migrated)


def _spread(values: list[float]) -> dict[str, Any]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "n": len(values),
        "seconds": [round(v, 3) for v in values],
    }


def to_json(meta: Mapping[str, Any], sides: list[Side], migrated: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = dict(meta)
    out["sides"] = {
        s.name: {
            "build_s": round(s.build_s, 1),
            "history_s": _spread(s.history_s),
            "load_s": _spread(s.load_s),
            **s.loaded,
        }
        for s in sides
    }
    answer = json.loads(sides[-1].output)
    out["change_points"] = sum(len(s["change_points"]) for s in answer["series"])
    if len(sides) == 2:
        before, after = sides
        out["identical"] = comparable(before.output) == comparable(after.output)
        out["ratio"] = {
            kind: round(statistics.median(getattr(after, kind)) / statistics.median(getattr(before, kind)), 3)
            for kind in ("history_s", "load_s")
        }
        out["migration_s"] = _spread(migrated)
    return out


def markdown(measured: Mapping[str, Any]) -> str:
    sides = measured["sides"]
    lines = [
        f"`fsmatrix history` over a store of {measured['documents']:,} documents ({measured['cells']} cells), "
        f"{measured['date']}, commit {measured['commit']}"
        + (f", before: {measured['before']}" if "before" in measured else "")
        + f"; load {measured['load_before']} before / {measured['load_after']} after; "
        f"{measured['repeats']} repetitions a side, alternating; {measured['elapsed_s']} s in all",
        "",
        "| side | history s: median (min..max) | load s: median (min..max) | series | points | store MB | built in s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in sides.items():
        h, ld = s["history_s"], s["load_s"]
        lines.append(
            f"| {name} | {h['median']:.2f} ({h['min']:.2f}..{h['max']:.2f}) | {ld['median']:.2f} "
            f"({ld['min']:.2f}..{ld['max']:.2f}) | {s['series']:,} | {s['points']:,} | "
            f"{measured['store_mb'][name]:,} | {s['build_s']:.0f} |"
        )
    lines += ["", f"{measured['change_points']} change points."]
    if "ratio" in measured:
        m, ratio = measured["migration_s"], measured["ratio"]
        same = "identical" if measured["identical"] else "DIFFER"
        lines.append(
            f"After/before (of the medians): history ×{ratio['history_s']:.3f}, load ×{ratio['load_s']:.3f}; "
            f"the two outputs {same}. Migrating the before store to this schema: {m['median']:.1f} s "
            f"({m['min']:.1f}..{m['max']:.1f}, n={m['n']})."
        )
    return "\n".join(lines) + "\n"
