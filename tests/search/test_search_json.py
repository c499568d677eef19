"""The search answer's JSON (``SearchAnswer.to_json``) against docs/search.schema.json: a full answer,
one that could not answer, one with numbers that are not finite; and a planted document the schema
refuses."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from fsmatrix.matrix import SearchSettings
from fsmatrix.results.verdict.search import SearchAnswer
from fsmatrix.results.verdict.space import SettingEffect
from fsmatrix.search.stages import run_search
from search_sim_lab import SimulatedLab, additive, space_of

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "search.schema.json").read_text())


def _valid(doc: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(json.dumps(doc, allow_nan=False)))


def _answer() -> SearchAnswer:
    space = space_of([3, 2, 2, 2])
    lab = SimulatedLab(space, additive(10.0, {(0, 2): -0.3, (1, 1): 0.2}), sigma=0.01, seed=4)
    return run_search(space, SearchSettings(budget_runs=80), lab, 0.05)


def test_a_full_answer_is_valid() -> None:
    answer = _answer()
    doc = answer.to_json()
    _valid(doc)
    assert doc["best"]["label"] == "s0=v2" and doc["best"]["levels"] == {"s0": "v2", "s1": "v0", "s2": "v0", "s3": "v0"}
    assert doc["settings"][0] == {"name": "s0", "levels": ["v0", "v1", "v2"], "default": "v0"}
    assert doc["runs_used"] == answer.runs_used and doc["version"] == 1 and doc["confidence"] == pytest.approx(0.95)
    assert [s["name"] for s in doc["stages"]] == ["screen", "refine", "race", "confirm"][: len(doc["stages"])]


def test_an_answer_that_could_not_answer_and_numbers_not_finite_are_valid() -> None:
    space = space_of([2] * 4)
    failed = run_search(space, SearchSettings(), SimulatedLab(space, lambda c: -math.inf), 0.05)
    doc = failed.to_json()
    _valid(doc)
    assert doc["best"] is None and doc["observed"] is None and doc["reason"].startswith("screening: not enough data")
    never = SettingEffect("s0", "v1", "v0", math.nan, math.nan, math.inf, "not separated")
    doc = SearchAnswer(**{**failed.__dict__, "effects": (never,), "untried_bound": math.inf}).to_json()
    _valid(doc)
    assert doc["effects"][0]["ratio"] is None and doc["effects"][0]["ci_high"] is None and doc["untried_bound"] is None


def test_the_schema_refuses_a_planted_document() -> None:
    doc = _answer().to_json()
    for planted in ({"best": {"label": "x"}}, {"direction": "sideways"}, {"surprise": 1}, {"stages": [{"name": "x"}]}):
        bad = copy.deepcopy(doc) | planted
        with pytest.raises(jsonschema.ValidationError):
            _valid(bad)
    missing = copy.deepcopy(doc)
    del missing["untried_bound"]
    with pytest.raises(jsonschema.ValidationError):
        _valid(missing)
