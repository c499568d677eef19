"""Cell ids are what results, resume and the regression gate match on: every matrix in matrix/, at its
own scale and at each named one, must expand to exactly the ids pinned here. A change that moves an id
is a change of what results mean: regenerate the file only on purpose, and say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from fsmatrix import matrix

PINNED = json.loads((REPO / "tests/data/matrix/cell_ids.json").read_text())


def _matrix_files() -> list[Path]:
    return sorted(p for p in (REPO / "matrix").rglob("*.yaml") if "published" not in p.relative_to(REPO).parts)


def _expansions() -> list[tuple[Path, str | None]]:
    found = []
    for path in _matrix_files():
        scales = sorted((yaml.safe_load(path.read_text()).get("scales") or {}).keys())
        found += [(path, None), *((path, s) for s in scales)]
    return found


@pytest.mark.parametrize(("path", "scale"), _expansions(), ids=lambda v: str(v))
def test_cell_ids_are_pinned(path: Path, scale: str | None) -> None:
    key = f"{path.relative_to(REPO)}@{scale or ''}"
    assert key in PINNED, f"{key}: a new matrix or scale; add its ids to tests/data/matrix/cell_ids.json"
    assert [c.id for c in matrix.load(path, scale=scale).cells] == PINNED[key]


def test_every_pinned_expansion_still_exists() -> None:
    assert sorted(PINNED) == sorted(f"{p.relative_to(REPO)}@{s or ''}" for p, s in _expansions())
