"""History on the work per operation (schema version 3): the work metrics are series of their own kind,
a constant one (0 bytes read per operation in every run) neither crashes Otava nor has a change point,
and a step in device bytes written per operation is found where it happened and attributed to a change
of how the work was measured. Real Otava in its own virtualenv, real SQLite stores, real `fsmatrix`
processes; the documents are a real host-backend result (tests/data/goldens)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from conftest import invoke
from fsmatrix.backends import image
from fsmatrix.results.store import Result, database, otava, schema
from fsmatrix.results.store import url as store_urls
from test_history import document

MEASURED = "cgroup: the workload's processes only"


@pytest.fixture(scope="module")
def otava_python() -> Path:
    return otava.ensure(image.cache_root() / otava.VENV_NAME)


def history_json(tmp_path: Path, docs: list[dict[str, Any]], *args: str) -> dict[str, Any]:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    with database.Store.open(store_urls.parse(url)) as opened:
        opened.push([Result.read(d) for d in docs])
    done = invoke("history", "--store", url, "--format", "json", *args)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_a_constant_series_has_no_change_point(otava_python: Path) -> None:
    version, found = otava.detect(otava_python, [[0.0] * 60, [193.984] * 60, [0.0] * 30 + [5.0] * 30])
    assert version == "0.8.0"
    assert found[:2] == [[], []]
    assert [f.index for f in found[2]] == [30]  # two constant stretches that differ: a change


def test_work_series_beside_time(tmp_path: Path, otava_python: Path) -> None:
    """40 nights, elapsed_s steps by 25 % at night 20, the work per operation the same every night (the
    template's: 193.984 bytes written, 0 read): three series, the step on time only."""
    rng = random.Random(3)
    docs = [document(i, rng.gauss(1.25 if i >= 20 else 1.0, 0.01), run_id=f"n{i}", work=True) for i in range(40)]
    doc = history_json(tmp_path, docs)
    by_metric = {s["metric"]: s for s in doc["series"]}
    assert set(by_metric) == {"elapsed_s", "device_write_bytes_per_op", "device_read_bytes_per_op"}
    assert by_metric["elapsed_s"]["kind"] == schema.KEY
    for name in ("device_write_bytes_per_op", "device_read_bytes_per_op"):
        assert by_metric[name]["kind"] == schema.WORK and by_metric[name]["change_points"] == []
        assert len(by_metric[name]["points"]) == 40
    assert [cp["index"] for cp in by_metric["elapsed_s"]["change_points"]] == [20]


def test_a_step_in_bytes_written_is_found_and_attributed(tmp_path: Path, otava_python: Path) -> None:
    """Bytes written per operation 20 % more from night 25 on, where the agent's mark of how the work is
    measured changed (and nothing else): found at 25 ± 1, attributed to that mark; time did not move."""
    rng = random.Random(11)
    docs = []
    for i in range(50):
        after = i >= 25
        doc = document(i, rng.gauss(1.0, 0.01), run_id=f"n{i}", work=True,
                       change={"provenance.work_measurement": MEASURED} if after else None)  # fmt: skip
        doc["metrics"]["device_write_bytes_per_op"] = round(rng.gauss(1.2 if after else 1.0, 0.02) * 193.984, 3)
        docs.append(doc)
    doc = history_json(tmp_path, docs)
    by_metric = {s["metric"]: s for s in doc["series"]}
    (cp,) = by_metric["device_write_bytes_per_op"]["change_points"]
    assert abs(cp["index"] - 25) <= 1, cp
    assert cp["changed"] == {"work measurement": [None, MEASURED]}
    assert 1.15 < cp["ratio"] < 1.25
    assert by_metric["elapsed_s"]["change_points"] == []
    md = invoke("history", "--store", f"sqlite:///{tmp_path / 'store.sqlite'}", "--fail-over", "10%")
    assert md.returncode == 1  # a work metric worse by 20 %: the nightly's --fail-over sees it
    assert "device_write_bytes_per_op (work per operation, lower is better)" in md.stdout
    assert f"work measurement – → {MEASURED}" in md.stdout


def test_flushes_that_stop_fail_the_nightly_though_less_is_better(tmp_path: Path, otava_python: Path) -> None:
    """Flush requests per operation 0 from night 25 on (a kernel that stopped flushing): a change point
    whose ratio is 0, "better" by its direction, and yet --fail-over fails on it: durability lost."""
    rng = random.Random(5)
    docs = []
    for i in range(50):
        doc = document(i, rng.gauss(1.0, 0.01), run_id=f"n{i}", work=True)
        doc["metrics"]["device_flushes_per_op"] = 0.0 if i >= 25 else round(rng.gauss(3.5e-4, 7e-6), 8)
        docs.append(doc)
    by_metric = {s["metric"]: s for s in history_json(tmp_path, docs)["series"]}
    (cp,) = by_metric["device_flushes_per_op"]["change_points"]
    assert abs(cp["index"] - 25) <= 1 and cp["ratio"] == 0
    done = invoke("history", "--store", f"sqlite:///{tmp_path / 'store.sqlite'}", "--fail-over", "10%")
    assert done.returncode == 1
    assert "change point stopped (durability lost): " in done.stderr and "device_flushes_per_op" in done.stderr
