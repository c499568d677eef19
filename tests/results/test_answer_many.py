"""Groups of many configurations (issue 53): the 32-configuration cross of five two-level settings reads
in a headline of at most two lines and a summarised body, at 2 runs (not enough data) and at 3 (comparisons
with the best, ``verdict/mcb.py``), in the run's closing lines, report.md and the JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np

from conftest import REPO, typed
from fsmatrix.matrix import MatrixCell, expand_document
from fsmatrix.results.render import answer_text
from fsmatrix.results.verdict import answer, answering, groups, mcb
from test_answer import THREEN1, runs

SCHEMA = json.loads((REPO / "docs" / "answer.schema.json").read_text(encoding="utf-8"))
LINE = 120  # a terminal line, for "at most two lines"
AXES = {
    "gtm.journal": ["before", "nobefore"],
    "gtm.global_buffers": [1000, 4000],
    "gtm.sync_io": [True, False],
    "filesystem": ["ext4", "xfs"],
    "mount_options": ["", "noatime"],
}


def cross() -> list[MatrixCell]:
    made = expand_document({"axes": AXES, "defaults": {"workload": THREEN1}}, "t").cells
    assert len(made) == 32
    return made


def docs(n: int, *, best_by: float = 0.0, seed: int = 53) -> list[dict[str, Any]]:
    """n runs of each of the 32 cells at 3 % noise; the first cell ``best_by`` faster than the others."""
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for i, cell in enumerate(cross()):
        centre = 10.0 / (1 + best_by) if i == 0 else 10.0 * (1 + 0.004 * i)
        out += runs(cell, [float(v) for v in centre * np.exp(rng.normal(0, 0.03, n))])
    return out


def the_group(n: int, best_by: float = 0.0) -> tuple[answer.Answer, answer.SpeedGroup]:
    found = answering.build(typed(docs(n, best_by=best_by)), None, None, answer.Rule(draws=400))
    (g,) = found.groups
    assert isinstance(g, answer.SpeedGroup)
    return found, g


def check_short(found: answer.Answer, g: answer.SpeedGroup) -> list[str]:
    said = answer_text.said(g, found.delta)
    assert len(said.headline) <= 2 * LINE, said.headline
    for s in said.details:  # no sentence spells out every configuration
        assert len(s) <= 4 * LINE, s
    lines = answer_text.markdown_lines(found)
    # the answer's own lines; the effects of the settings (issue 50) follow as a table of their own
    effects = next((i for i, line in enumerate(lines) if line.startswith("**Effects of the settings")), len(lines))
    assert effects < 20
    for line in answer_text.summary_lines(found):
        assert len(line) <= 2 * LINE + len("answer: ") + len(g.label) + 2
    doc = answer_text.to_json(found)
    jsonschema.validate({"title": "t", "answer": doc}, SCHEMA)
    assert len(doc["groups"][0]["configurations"]) == 32  # the full detail stays in the JSON
    return [said.headline, *said.details]


def test_two_runs_each_say_how_many_lack_how_many_runs() -> None:
    found, g = the_group(2)
    sentences = check_short(found, g)
    assert sentences[0] == (
        "Not enough data to answer: none of the 32 configurations has at least 3 passed runs, no failed one and "
        "no value <= 0: 32 with 2 passed runs (of the 3 needed)."
    )


def test_three_runs_each_name_the_leader_and_count_the_rest() -> None:
    found, g = the_group(3)
    assert g.rule == "mcb" and answer_text.to_json(found)["groups"][0]["rule"] == "mcb"
    sentences = check_short(found, g)
    assert sentences[0].startswith("No single best: ") and " of 32 configurations not separated" in sentences[0]
    assert any("… and " in s and "more, all not separated: the table below" in s for s in sentences)
    assert any(s.startswith("Rule: comparisons with the best (32 configurations") for s in sentences)


def test_a_clear_best_of_32_is_named_by_mcb_where_all_pairs_cannot() -> None:
    found, g = the_group(3, best_by=1.0)
    sentences = check_short(found, g)
    assert g.verdict == "best" and g.best is not None and sentences[0].startswith(f"{g.best} is best of 32")
    assert "of the others, 31 worse" in sentences[0]
    # the same runs under all pairs: the best is not named
    logs = {
        c.name: np.log([d["metrics"]["elapsed_s"] for d in docs(3, best_by=1.0) if d["cell_id"] == c.cell])
        for c in g.configurations
    }
    means = np.array([[v.mean() for v in logs.values()]])
    variances = np.array([[v.var(ddof=1) for v in logs.values()]])
    pairs = groups.decide(means, variances, np.full(32, 3), rule="pairs")
    assert not (pairs.status == groups.BEST).any()


def test_small_groups_keep_all_pairs() -> None:
    assert [mcb.rule_for(k) for k in (2, mcb.PAIRS_UP_TO, mcb.PAIRS_UP_TO + 1)] == ["pairs", "pairs", "mcb"]


def test_mcb_calls_worse_only_what_is_separated_from_every_possible_best() -> None:
    """Two equal configurations far ahead, two far behind: neither of the two ahead is worse, both behind
    are; with one noisy configuration not separated from anything in the set, nothing is worse than it."""
    means = np.array([[0.0, 0.0, 1.0, 1.0]])
    variances = np.full((1, 4), 1e-4)
    counts = np.full((1, 4), 5.0)
    in_set, worse, _ = mcb.against_the_set(means, variances, counts, 0.05 / 3, math.log1p(0.05))
    assert in_set.tolist() == [[True, True, False, False]] and worse.tolist() == [[False, False, True, True]]
    variances[0, 1] = 10.0  # the second one's interval reaches everything: it may be best
    in_set, worse, _ = mcb.against_the_set(means, variances, counts, 0.05 / 3, math.log1p(0.05))
    assert worse.tolist() == [[False, False, False, False]]


def test_the_json_names_the_rule_of_a_small_group(tmp_path: Path) -> None:
    from test_answer import demo

    _, small = demo()
    found = answering.build(typed(small), None, None, answer.Rule(draws=400))
    assert answer_text.to_json(found)["groups"][0]["rule"] == "pairs"


def test_the_simulation_keeps_both_rules_family_error_and_shows_mcb_s_gain() -> None:
    from fsmatrix.bench import answer as bench_answer

    pairs, best = bench_answer.rule_design(12, 3, 0.03, 500, 0)
    assert (pairs.rule, best.rule) == ("pairs", "mcb")
    for r in (pairs, best):
        assert r.family_error <= 0.055 and r.tied_error <= 0.055, r
    assert best.critical_t < pairs.critical_t and best.best_named_50 > pairs.best_named_50 + 0.3
