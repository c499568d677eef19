"""Each setting's effect (results/verdict/effects.py) on typed results built here with known effects:
the ratios found, their words against ±δ, aliasing on a fraction and on what ran, the missing cells,
a metric with zeros, and the family's intervals."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest

from conftest import typed
from fsmatrix import matrix as matrices
from fsmatrix import runs as run_records
from fsmatrix.matrix import MatrixCell, expand_document
from fsmatrix.results import store
from fsmatrix.results.verdict import answer, answering, effects
from test_answer import runs as result_docs

THREEN1 = {"threen1": {"start": 1, "end": 1000, "workers": 2, "block": 100}}
AXES = {
    "gtm.global_buffers": [35000, 64],
    "gtm.journal": ["before", "nobefore"],
    "gtm.sync_io": [False, True],
    "gtm.full_block_writes": [False, True],
    "mount_options": ["", "noatime"],
}
# ln of each setting's ratio high/low: global_buffers 1.7×, journal 0.9×, the rest nothing
TRUE = {"gtm.global_buffers": math.log(1.7), "gtm.journal": math.log(0.9)}


def made(design: Any = "full") -> matrices.Matrix:
    doc = {"name": "e", "design": design, "axes": {**AXES, "workload": [THREEN1]}, "defaults": {"filesystem": "ext4"}}
    return expand_document(doc, "t")


def docs_of(cells: list[MatrixCell], repeats: int = 3, cv: float = 0.03, seed: int = 1) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for c in cells:
        flat = matrices.flatten(c.params)
        high = {k: flat.get(k, AXES[k][0]) != AXES[k][0] for k in AXES}
        log_mean = math.log(10) + sum(v / 2 * (1 if high[k] else -1) for k, v in TRUE.items())
        out += result_docs(c, [math.exp(log_mean + rnd.gauss(0, cv)) for _ in range(repeats)])
    return out


def effects_of(m: matrices.Matrix, docs: list[dict[str, Any]]) -> effects.Effects:
    record = store.RunMatrix.read(run_records.matrix_record(m, m.cells, 3))
    found = answering.build(typed(docs), record, None, answer.Rule(draws=200))
    g = found.groups[0]
    assert isinstance(g, answer.SpeedGroup) and g.effects is not None
    return g.effects


def test_a_full_cross_finds_the_two_settings_that_matter() -> None:
    m = made()
    e = effects_of(m, docs_of(m.cells))
    assert (e.kind, e.runs, e.full_runs, e.resolution) == ("full", 32, 32, None)
    by = {x.name: x for x in e.effects}
    assert by["gtm.global_buffers"].words == "matters" and by["gtm.journal"].words == "matters"
    assert by["gtm.global_buffers"].ci_low < 1.7 < by["gtm.global_buffers"].ci_high
    assert (by["gtm.global_buffers"].low, by["gtm.global_buffers"].high) == ("35000", "64")
    assert by["gtm.journal"].ci_low < 0.9 < by["gtm.journal"].ci_high
    assert all(by[k].words == "equivalent" for k in ("gtm.sync_io", "gtm.full_block_writes", "mount_options"))
    assert [x.name for x in e.matters()] == ["gtm.global_buffers", "gtm.journal"]
    assert len(e.interactions) == 10 and all(x.words == "equivalent" for x in e.interactions)
    assert e.family == 15 and e.lack_of_fit is not None
    # orthogonal: the shares add up to at most 1, global_buffers the most
    shares = [x.share for x in (*e.effects, *e.interactions)]
    assert all(s is not None for s in shares) and sum(s or 0 for s in shares) <= 1
    assert max(e.effects, key=lambda x: x.share or 0).name == "gtm.global_buffers"


def test_a_resolution_iii_fraction_names_its_aliases() -> None:
    m = made({"kind": "fractional", "runs": 8})
    e = effects_of(m, docs_of(m.cells))
    assert (e.kind, e.runs, e.full_runs, e.resolution) == ("fractional", 8, 32, 3)
    assert len(e.effects) == 5
    assert all(x.aliased_with for x in e.effects)  # each setting aliased with a two-setting interaction
    assert all(" × " in a for x in e.effects for a in x.aliased_with)
    by = {x.name: x for x in e.effects}
    assert by["gtm.global_buffers"].words == "matters"


def test_a_missing_cell_is_named_and_the_aliases_recomputed() -> None:
    m = made({"kind": "fractional", "resolution": 5})
    docs = docs_of(m.cells)
    gone = m.cells[3].id
    whole = effects_of(m, docs)
    assert not any(x.aliased_with for x in whole.effects)
    part = effects_of(m, [d for d in docs if d["cell_id"] != gone])
    assert part.missing == (gone,) and part.runs == 16
    # 15 cells cannot carry 15 terms and the mean: some term is aliased now
    assert len(part.effects) + len(part.interactions) < 15
    assert any(x.aliased_with for x in (*part.effects, *part.interactions))
    failed = [dict(d, status="failed", reason="x") if d["cell_id"] == gone else d for d in docs]
    named = effects_of(m, failed)
    assert len(named.missing) == 1


def test_zeros_are_not_enough_data() -> None:
    m = made()
    docs = docs_of(m.cells)
    docs[0]["metrics"]["elapsed_s"] = 0.0
    e = effects_of(m, docs)
    assert not e.fitted and e.reason.startswith("not enough data")


@pytest.mark.parametrize(
    ("lo", "hi", "words"),
    [
        (1.06, 1.2, "matters"),
        (0.8, 0.94, "matters"),
        (0.97, 1.03, "equivalent"),
        (1.01, 1.03, "equivalent"),
        (1.01, 1.2, "unsettled"),
        (0.9, 1.1, "not separated"),
    ],
)
def test_words(lo: float, hi: float, words: str) -> None:
    assert effects.words_for(lo, hi, 0.05) == words


def test_the_family_holds_on_null_effects() -> None:
    """No setting matters: over many simulated crosses, a wrong "matters" or "unsettled" in at most
    about α of them (the benchmark measures it properly: bench/effects.py)."""
    levels = list(itertools.product((-1, 1), repeat=4))
    rnd = random.Random(3)
    wrong = 0
    for _ in range(60):
        runs = [
            effects.Run(str(i), lv, r, math.exp(rnd.gauss(0, 0.08 if i % 2 else 0.03)))
            for i, lv in enumerate(levels)
            for r in range(1, 4)
        ]
        fitted = effects.fit(runs, ["a", "b", "c", "d"], 0.05, 0.05)
        assert not isinstance(fitted, str)
        terms, *_ = fitted
        wrong += any(t.ci_low > 1 or t.ci_high < 1 for t in terms)
    assert wrong <= 8


def test_the_report_json_and_page_show_the_effects() -> None:
    import json

    import jsonschema

    from conftest import REPO
    from fsmatrix.results.render import answer_text, page
    from fsmatrix.results.render import effects as shown

    m = made()
    record = store.RunMatrix.read(run_records.matrix_record(m, m.cells, 3))
    found = answering.build(typed(docs_of(m.cells)), record, None, answer.Rule(draws=200))
    g = found.groups[0]
    assert isinstance(g, answer.SpeedGroup) and g.effects is not None
    head = shown.headline(g.effects, g.metric_words)
    assert head.startswith("What moves elapsed time here: gtm.global_buffers 35000 → 64 1.6")
    assert "; gtm.journal before → nobefore 0.9" in head and head.endswith("the other three within ±5 %.")
    text = "\n".join(answer_text.markdown_lines(found))
    assert (
        "**Effects of the settings on elapsed time.** What moves elapsed time here: " in text
        and "| gtm.global_buffers 35000 → 64 |" in text
    )
    doc = {"title": "t", "answer": answer_text.to_json(found)}
    schema = json.loads((REPO / "docs" / "answer.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema)
    group = doc["answer"]["groups"][0]
    assert group["design"]["kind"] == "full" and group["design"]["full_runs"] == 32
    assert {e["setting"] for e in group["effects"] if e["words"] == "matters"} == {"gtm.global_buffers", "gtm.journal"}
    assert all(len(i["settings"]) == 2 for i in group["interactions"])
    html = "\n".join(page._answer_html(found))
    assert '<svg class="effects"' in html and "Effects of the settings" in html


def _term(words: str, low: float, high: float) -> effects.Effect:
    return effects.Effect(("a",), "x", "y", (low * high) ** 0.5, low, high, words, None, ())


def test_settle_repeats_scale_with_the_widest_open_interval_and_say_none_when_all_are_settled() -> None:
    settled = [_term("matters", 1.3, 1.5), _term("equivalent", 0.98, 1.02)]
    assert effects.settle_repeats(settled, 15, 0.05, 0.05, 3.0) is None
    wide = effects.settle_repeats([*settled, _term("not separated", 0.9, 1.1)], 15, 0.05, 0.05, 3.0)
    narrow = effects.settle_repeats([*settled, _term("unsettled", 1.01, 1.11)], 15, 0.05, 0.05, 3.0)
    assert wide is not None and narrow is not None
    # the runs needed grow as the square of the interval's width: about four times for twice as wide
    assert 3 <= wide / narrow <= 5, (wide, narrow)
    assert effects.settle_repeats([_term("not separated", 0.5, 2.0)], 15, 0.05, 0.05, 3.0) == effects.SETTLE_MAX + 1


def test_a_two_level_optimal_design_gets_the_model_it_was_chosen_for() -> None:
    """A D-optimal design over two-level settings reads as its model: main effects only for "main"
    (no interaction estimated), with the two-setting interactions for "interactions"."""
    main = made({"kind": "optimal", "runs": 10, "model": "main", "seed": 3})
    e = effects_of(main, docs_of(main.cells))
    assert (e.kind, e.runs, e.full_runs) == ("optimal", 10, 32)
    assert e.interactions == () and len(e.effects) == 5
    buffers = {x.name: x for x in e.effects}["gtm.global_buffers"]
    assert buffers.words == "matters" and buffers.ci_low < 1.7 < buffers.ci_high
    wide = made({"kind": "optimal", "runs": 20, "model": "interactions", "seed": 3})
    w = effects_of(wide, docs_of(wide.cells))
    assert w.kind == "optimal" and len(w.interactions) == 10


def test_cell_errors_on_one_setting_are_welchs_test() -> None:
    """Two cells, unequal spreads: each coefficient's error and degrees of freedom are Welch's for the
    two cells' means (scipy's ttest_ind, equal_var=False), not a pooled variance's."""
    import numpy as np
    from scipy import stats as scipy_stats

    low, high = [1.00, 1.02, 0.99], [1.30, 1.10, 1.45]
    y = np.log(np.array(low + high))
    x = np.column_stack([np.ones(6), [-1.0] * 3 + [1.0] * 3])
    errors, dfs = effects.cell_errors(y, x, ["lo"] * 3 + ["hi"] * 3, x[:, :1])
    welch = scipy_stats.ttest_ind(y[3:], y[:3], equal_var=False)
    beta = (y[3:].mean() - y[:3].mean()) / 2
    assert beta / errors[1] == pytest.approx(welch.statistic)
    assert dfs[1] == pytest.approx(welch.df)
    pooled = scipy_stats.ttest_ind(y[3:], y[:3])
    assert dfs[1] < pooled.df  # a noisy cell leaves fewer degrees of freedom than the pooled 4


def test_one_noisy_cell_among_quiet_ones_leaves_its_own_degrees_of_freedom() -> None:
    """A 2^3 cross, 3 runs a cell, one cell 20× noisier: the effects' errors come from it and their
    degrees of freedom fall to about its own 2, where a pooled error would claim 16 (in a balanced
    orthogonal design the error itself is the pooled one's: the mean of the cells' variances)."""
    import numpy as np

    rnd = random.Random(5)
    levels = list(itertools.product((-1.0, 1.0), repeat=3))
    rows, y, cells = [], [], []
    for i, lv in enumerate(levels):
        for _ in range(3):
            rows.append([1.0, *lv])
            y.append(rnd.gauss(0, 0.2 if i == 0 else 0.01))
            cells.append(str(i))
    x = np.array(rows)
    errors, dfs = effects.cell_errors(np.array(y), x, cells, x[:, :1])
    assert all(2 <= d < 3 for d in dfs[1:])
    spreads = [np.var([v for v, c in zip(y, cells, strict=True) if c == str(i)], ddof=1) for i in range(8)]
    assert errors[1:] == pytest.approx([math.sqrt(np.mean(spreads) / 24)] * 3)
