"""Matrix files: load, validate and expand into cells with stable ids.

The package by concept, this module only its face (what callers use, re-exported):

- ``expand``: a matrix document's ``axes``, ``exclude``, ``include``, ``defaults`` and scales
  crossed into a ``Matrix`` of cells (GitHub Actions' rules; ``load`` reads a file first);
- ``ids``: a cell's identity, ``MatrixCell`` and ``cell_id`` (pinned: tests/matrix/test_cell_ids_pinned.py);
- ``baselines``: comparison groups (``group_of`` a typed cell, ``groups``) and each one's baseline cell;
- ``settings``: what a run takes besides its cells: ``race:`` and a build's ``--settings`` file;
- ``sharding``: the cells as CI jobs or Slurm array tasks;
- ``flat``: settings as dotted paths with their lines; ``read``: a YAML file within limits;
  ``schema``: the JSON Schema from the declarations; ``yamlpos``: YAML with line numbers.
"""

from __future__ import annotations

from fsmatrix.matrix.baselines import DEFAULTS_RULE, NAMED_RULE, ComparisonGroup, group_key, group_of, groups
from fsmatrix.matrix.expand import (
    MAX_CELLS,
    SCALE_KEYS,
    TOP_LEVEL,
    IncludeEffect,
    Matrix,
    expand_document,
    load,
    scale_names,
)
from fsmatrix.matrix.flat import Flat, Leaf, flatten
from fsmatrix.matrix.ids import MatrixCell, cell_id
from fsmatrix.matrix.read import MAX_FILE_BYTES
from fsmatrix.matrix.settings import (
    MAX_REPEAT,
    RACE_DELTA,
    RACE_KEYS,
    RACE_MAX_REPEATS,
    RACE_MIN_REPEATS,
    BuildSettings,
    RaceSettings,
    SearchSettings,
    default_race,
    parse_duration,
    race_settings,
    read_settings,
)
from fsmatrix.matrix.sharding import MAX_JOBS_PER_MATRIX, shards

__all__ = [
    "DEFAULTS_RULE",
    "MAX_CELLS",
    "MAX_FILE_BYTES",
    "MAX_JOBS_PER_MATRIX",
    "MAX_REPEAT",
    "NAMED_RULE",
    "RACE_DELTA",
    "RACE_KEYS",
    "RACE_MAX_REPEATS",
    "RACE_MIN_REPEATS",
    "SCALE_KEYS",
    "TOP_LEVEL",
    "BuildSettings",
    "ComparisonGroup",
    "Flat",
    "IncludeEffect",
    "Leaf",
    "Matrix",
    "MatrixCell",
    "RaceSettings",
    "SearchSettings",
    "cell_id",
    "default_race",
    "expand_document",
    "flatten",
    "group_key",
    "group_of",
    "groups",
    "load",
    "parse_duration",
    "race_settings",
    "read_settings",
    "scale_names",
    "shards",
]
