"""Fixed repeats in rounds run each round's cells in a seeded random order, recorded in matrix.json
(``order``: the seed and each round's cell ids), so that a drift of the machine lines up with no axis;
a resumed run keeps its seed. ``Drawn`` (test_race.py) runs nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from fsmatrix import racing, runs
from fsmatrix.matrix import MatrixCell
from fsmatrix.results import store
from test_race import Drawn, _matrix

ENDS = tuple(range(100, 900, 100))  # eight cells


class Recorded(Drawn):
    def __init__(self) -> None:
        super().__init__({"ext4": (1.0, 0.01)})
        self.ids: list[tuple[str, int]] = []

    def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
        self.ids.append((cell.id, repeat))
        return super().run(cell, repeat)


def run(tmp_path: Path, run_id: str = "r", force: bool = False) -> tuple[Recorded, dict[str, Any]]:
    m = _matrix(["ext4"], ENDS)
    backend = Recorded()
    options = runs.RunOptions(tmp_path, run_id, racing.RunPlan(None, 3), force=force, order="rounds")
    runs.run_matrix(m, m.cells, backend, options, Console(file=io.StringIO()))
    return backend, json.loads((tmp_path / run_id / "matrix.json").read_text())


def test_each_round_runs_in_its_own_recorded_order(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "matrix.json").write_text(json.dumps({"cells": [], "order": {"seed": 7, "rounds": []}}))
    backend, record = run(tmp_path)
    rounds = record["order"]["rounds"]
    assert record["order"]["seed"] == 7 and len(rounds) == 3
    # every cell once a round, in the order recorded, and the rounds' orders differ
    assert backend.ids == [(cell_id, r) for r, ids in enumerate(rounds, 1) for cell_id in ids]
    assert all(sorted(ids) == sorted(rounds[0]) and len(ids) == len(ENDS) for ids in rounds)
    assert len({tuple(ids) for ids in rounds}) == 3
    # reproducible from the seed alone
    cells = _matrix(["ext4"], ENDS).cells
    assert [[c.id for c in runs.round_order(cells, 7, r)] for r in (1, 2, 3)] == rounds
    assert store.load_run_matrix(tmp_path / "r") == store.RunMatrix.read(record)
    assert store.RunMatrix.read(record).order == store.RunOrder(7, tuple(map(tuple, rounds)))


def test_a_resumed_run_keeps_its_order_and_a_new_run_draws_its_own(tmp_path: Path) -> None:
    first, record = run(tmp_path)
    again, resumed = run(tmp_path, force=True)  # every run again, as a resumed run would run what is left
    assert resumed["order"] == record["order"] and again.ids == first.ids
    _, other = run(tmp_path, "s")
    assert other["order"]["seed"] != record["order"]["seed"]  # 2^32 seeds: equal by chance once in 4e9


def test_a_matrix_json_without_an_order_is_read(tmp_path: Path) -> None:
    """Older runs (and races, and runs cell by cell) record no order."""
    assert store.RunMatrix.read({"cells": []}).order is None
    assert store.RunOrder.read({"seed": True}) is None and store.RunOrder.read(None) is None
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "matrix.json").write_text(json.dumps({"name": "old", "cells": []}))
    backend, record = run(tmp_path)
    assert isinstance(record["order"]["seed"], int) and len(backend.ids) == 3 * len(ENDS)
