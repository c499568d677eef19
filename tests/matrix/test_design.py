"""``design:``: two-level fractions of a matrix's axes (matrix/design.py): the fraction chosen, its
resolution and alias chains, matrix.json keeping its generators, ``matrix expand`` showing it, fixed
repeats, and every bad input one line naming ``design`` with exit 2 before any run."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import invoke
from fsmatrix import matrix, racing, runs
from fsmatrix.errors import UserError
from fsmatrix.matrix import design

FIVE = """\
name: five
design: DESIGN
axes:
  filesystem: [ext4]
  gtm.global_buffers: [35000, 64]
  gtm.journal: [before, nobefore]
  gtm.sync_io: [false, true]
  gtm.full_block_writes: [false, true]
  mount_options: ["", "noatime"]
  workload:
    - threen1: {start: 1, end: 1000, workers: 2, block: 100}
repeat: 3
"""


def five(tmp_path: Path, spec: str, text: str = FIVE) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text.replace("DESIGN", spec))
    return path


def fail(message: str, line: int | None) -> Exception:
    return UserError(message, line=line)


def test_full_is_the_cross_and_the_default(tmp_path: Path) -> None:
    full = matrix.load(five(tmp_path, "full"))
    assert len(full.cells) == 32 and full.design is None
    without = matrix.load(five(tmp_path, "full", FIVE.replace("design: DESIGN\n", "")))
    assert [c.id for c in without.cells] == [c.id for c in full.cells]


def test_a_half_fraction_of_five_settings_is_resolution_v(tmp_path: Path) -> None:
    m = matrix.load(five(tmp_path, "{kind: fractional, resolution: 4}"))
    assert m.design is not None and (m.design.runs, m.design.resolution, m.design.full_runs) == (16, 5, 32)
    assert len(m.cells) == 16
    # balanced: every setting at each of its values in half the cells, every pair of settings in each
    # combination a quarter
    flats = [matrix.flatten(c.params) for c in m.cells]
    for f in m.design.factors:
        assert Counter(str(x[f]) for x in flats).most_common()[-1][1] == 8
    pairs = Counter((str(x["gtm.journal"]), str(x["mount_options"])) for x in flats)
    assert set(pairs.values()) == {4}
    # no main effect or two-setting interaction aliased with another
    assert m.design.alias_chains() == []


def test_eight_runs_of_five_settings_and_their_alias_chains(tmp_path: Path) -> None:
    m = matrix.load(five(tmp_path, "{kind: fractional, runs: 8}"))
    assert m.design is not None and (m.design.runs, m.design.resolution) == (8, 3)
    assert len(m.cells) == 8
    chains = [" = ".join(design.term_name(t, m.design.factors) for t in c) for c in m.design.alias_chains()]
    # resolution III: each setting aliased with some two-setting interaction
    for f in m.design.factors:
        assert any(chain.startswith(f + " = ") for chain in chains), (f, chains)
    words = m.design.defining_words()
    assert len(words) == 3 and min(w.bit_count() for w in words) == 3


def test_the_cells_are_those_of_the_levels(tmp_path: Path) -> None:
    made = design.fraction(design.DesignSpec("fractional", runs=8), ["a", "b", "c", "d"], None, fail)
    assert made.runs == 8 and made.resolution == 4 and len(made.levels()) == 8
    # each cell satisfies the defining relation: an even number of high levels in every word
    for levels in made.levels():
        for word in made.defining_words():
            assert sum(levels[i] for i in range(4) if word >> i & 1) % 2 == 0
    assert len(set(made.levels())) == 8


def test_many_settings_use_the_fewest_runs_at_the_resolution() -> None:
    made = design.fraction(design.DesignSpec("fractional", resolution=4), [f"s{i}" for i in range(10)], None, fail)
    assert made.runs == 32 and made.resolution >= 4


def test_matrix_json_keeps_the_generators(tmp_path: Path) -> None:
    m = matrix.load(five(tmp_path, "{kind: fractional, runs: 8}"))
    record = runs.matrix_record(m, m.cells, 3)
    assert record["design"]["generators"] == list(m.design.generators) if m.design else False
    assert record["design"]["resolution"] == 3 and record["design"]["runs"] == 8
    assert "design" not in runs.matrix_record(matrix.load(five(tmp_path, "full")), [], 3)


def test_a_stored_design_is_taken_not_built_again(tmp_path: Path) -> None:
    """Resume (``fsmatrix run`` on a run directory whose matrix.json holds a fraction) takes the stored
    generators, even where pyDOE would choose others today; a record of another ``design:`` or other
    settings, or one fsmatrix did not write, is not taken."""
    path = five(tmp_path, "{kind: fractional, runs: 8}")
    built = matrix.load(path)
    assert built.design is not None and built.design.record()["asked"] == {"runs": 8}
    # another 8-run fraction of the five: the two generated factors from other products
    other = {**built.design.record(), "words": [1, 2, 4, 1 | 2 | 4, 1 | 2]}
    taken = matrix.load(path, stored_design=lambda name: other if name == "five" else None)
    assert taken.design is not None and list(taken.design.words) == other["words"]
    assert {c.id for c in taken.cells} != {c.id for c in built.cells} and len(taken.cells) == 8
    for stale in (
        {**other, "asked": {"runs": 16}},  # the file asks for another design now
        {**other, "factors": other["factors"][::-1]},  # other settings
        {**other, "words": [1, 2, 4, 8, 3]},  # four base factors: 16 runs, not the 8 asked
        {**other, "words": [1, 2, 4, "x", 3]},
    ):
        again = matrix.load(path, stored_design=lambda name, s=stale: s)  # type: ignore[misc]
        assert again.design is not None and again.design.words == built.design.words, stale


def test_a_resumed_run_reads_its_fraction_from_matrix_json(tmp_path: Path) -> None:
    path = five(tmp_path, "{kind: fractional, runs: 8}")
    built = matrix.load(path)
    assert built.design is not None
    run_dir = tmp_path / "results" / "five"
    run_dir.mkdir(parents=True)
    record = runs.matrix_record(built, built.cells, 3)
    record["design"]["words"] = [1, 2, 4, 7, 3]
    (run_dir / "matrix.json").write_text(json.dumps(record))
    assert runs.stored_design(run_dir) == record["design"]
    assert runs.stored_design(tmp_path / "results" / "none") is None
    # as `fsmatrix run` loads the file (cli/run.py)
    taken = matrix.load(path, stored_design=lambda name: runs.stored_design(tmp_path / "results" / name))
    assert taken.design is not None and list(taken.design.words) == [1, 2, 4, 7, 3]


def test_the_fraction_is_the_same_every_time() -> None:
    """Shards (GitHub jobs, Slurm tasks) expand the file again, each with the same fsmatrix and pyDOE as
    the step that chose their cells: the choice is a function of the settings and ``design:`` alone
    (an exhaustive search in a fixed order, or the greedy one's), never of a random draw."""
    for spec in (design.DesignSpec("fractional", runs=8), design.DesignSpec("fractional", runs=64)):
        factors = [f"s{i}" for i in range(5 if spec.runs == 8 else 10)]
        first = design.fraction(spec, factors, None, fail)
        assert all(design.fraction(spec, factors, None, fail).words == first.words for _ in range(2))


def test_a_ten_setting_fraction_is_built_quickly() -> None:
    """fracfact_opt's search grows as C(2^m − m − 1, p): 15 s and more past 9 settings. Beyond
    MAX_SEARCH the generators are chosen one at a time, at the resolution the best design has here."""
    import time

    started = time.monotonic()

    def made(k: int, n: int) -> design.Fraction:
        return design.fraction(design.DesignSpec("fractional", runs=n), [f"s{i}" for i in range(k)], None, fail)

    tens, nine = [made(10, 32), made(10, 64)], made(9, 32)
    assert time.monotonic() - started < 20  # generous: a loaded machine; the search itself took minutes
    assert [(f.runs, f.resolution) for f in (*tens, nine)] == [(32, 4), (64, 4), (32, 4)]
    assert all(len(f.levels()) == f.runs for f in (*tens, nine))


def test_a_fraction_runs_fixed_repeats(tmp_path: Path) -> None:
    m = matrix.load(five(tmp_path, "{kind: fractional, runs: 8}"))
    plan = racing.plan(m, m.cells)
    assert plan.race is None and plan.repeat == 3 and "designed experiment" in plan.why
    with pytest.raises(UserError, match="design: a designed experiment runs fixed repeats"):
        racing.plan(m, m.cells, race=True)


def test_expand_prints_the_design(tmp_path: Path) -> None:
    done = invoke("matrix", "expand", str(five(tmp_path, "{kind: fractional, runs: 8}")), "--results", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "design: a 2^(5−2) fraction of resolution III: 8 of the full cross's 32 cells" in done.stdout
    assert "aliased: gtm.journal = gtm.sync_io × mount_options" in done.stdout
    assert "generator: " in done.stdout and "defining relation: I = " in done.stdout


BAD = [
    ("{kind: fractional, resolution: 6}", FIVE, "no fraction of 5 settings reaches resolution 6"),
    ("{kind: fractional, runs: 4}", FIVE, "no fraction of 5 settings has 4 runs; at least 8"),
    ("{kind: fractional, runs: 12}", FIVE, "must be a power of two"),
    ("{kind: fractional, runs: 32}", FIVE, "the full cross"),
    ("{kind: fractional, resolution: 2}", FIVE, "below III"),
    ("{kind: fractional}", FIVE, "one of resolution or runs"),
    ("{kind: plackett}", FIVE, "unknown kind 'plackett'"),
    ("{kind: screening}", FIVE, "takes runs: N"),
    ("{kind: screening, runs: 12, model: main}", FIVE, "unknown keys model for screening"),
    ("{kind: screening, runs: 4}", FIVE, "a screening design of 4 runs takes at most 3 settings; this file has 5"),
    ("{kind: screening, runs: 32}", FIVE, "the full cross"),
    (
        "{kind: optimal, runs: 4}",
        "name: one\ndesign: DESIGN\naxes:\n  filesystem: [ext4]\n  workload:\n    - threen1: {start: 1, end: 9}\n",
        "an optimal design needs an axis of two or more values",
    ),
    ("{kind: screening, runs: 16}", FIVE, "the Plackett–Burman design of 16 runs repeats a cell over 5 settings"),
    ("{kind: screening, runs: 25}", FIVE, "pyDOE has no Plackett–Burman design of 28 runs; it has 32, 40, 48"),
    (
        "{kind: screening, runs: 12}",
        FIVE.replace("[before, nobefore]", "[before, nobefore, 'off']"),
        "a two-level screening design takes axes of two values; gtm.journal (3 values)",
    ),
    ("{kind: screening, runs: 12}", FIVE + "exclude:\n  - {gtm.journal: nobefore}\n", "'exclude' removes a cell"),
    ("halfway", FIVE, "unknown kind 'halfway'"),
    (
        "{kind: fractional, runs: 8}",
        FIVE + "include:\n  - {gtm.journal: before, gtm.block_size: 8192}\n",
        "takes no include entries",
    ),
    ("{kind: fractional, runs: 8}", FIVE + "exclude:\n  - {gtm.journal: nobefore, gtm.sync_io: true}\n", "'exclude'"),
    (
        "{kind: fractional, runs: 8}",
        FIVE.replace("[before, nobefore]", "[before, nobefore, 'off']"),
        "gtm.journal (3 values)",
    ),
]


@pytest.mark.parametrize(("spec", "text", "why"), BAD)
def test_bad_designs_are_one_line_and_exit_2(tmp_path: Path, spec: str, text: str, why: str) -> None:
    path = five(tmp_path, spec, text)
    done = invoke("matrix", "expand", str(path), "--results", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{path}:2: " in lines[0] and "design" in lines[0] and why in lines[0], lines


def test_run_refuses_a_bad_design_before_any_run(tmp_path: Path) -> None:
    path = five(tmp_path, "{kind: fractional, resolution: 6}")
    done = invoke("run", str(path), "--backend", "host", "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and "design" in done.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_an_exclude_outside_the_fraction_is_fine(tmp_path: Path) -> None:
    """An exclude that removes only cells the fraction does not run leaves it balanced."""
    m = matrix.load(five(tmp_path, "{kind: fractional, runs: 8}"))
    assert m.design is not None
    kept = {json.dumps(c.params, sort_keys=True) for c in m.cells}
    full = matrix.load(five(tmp_path, "full"))
    outside = next(c for c in full.cells if json.dumps(c.params, sort_keys=True) not in kept)
    flat = matrix.flatten(outside.params)
    entry = ", ".join(f"{f}: {json.dumps(flat[f])}" for f in m.design.factors)
    again = matrix.load(five(tmp_path, "{kind: fractional, runs: 8}", FIVE + f"exclude:\n  - {{{entry}}}\n"))
    assert [c.id for c in again.cells] == [c.id for c in m.cells]


# ----------------------------------------------------------------------------------- screening


def test_a_screening_design_is_plackett_burman_rounded_up_to_a_multiple_of_4(tmp_path: Path) -> None:
    m = matrix.load(five(tmp_path, "{kind: screening, runs: 10}"))
    assert isinstance(m.design, design.Screening) and (m.design.runs, m.design.full_runs) == (12, 32)
    assert len(m.cells) == 12 and len({c.id for c in m.cells}) == 12
    # balanced: each setting at each value in half the cells; pairs of settings in each combination a quarter
    flats = [matrix.flatten(c.params) for c in m.cells]
    for f in m.design.factors:
        assert set(Counter(str(x[f]) for x in flats).values()) == {6}
    assert set(Counter((str(x["gtm.journal"]), str(x["mount_options"])) for x in flats).values()) == {3}
    again = design.screening(design.DesignSpec("screening", runs=12), m.design.factors, None, fail)
    assert again.rows == m.design.rows  # the same every time (pbdesign builds, it does not draw)


def test_a_screening_design_is_stored_and_taken_back(tmp_path: Path) -> None:
    path = five(tmp_path, "{kind: screening, runs: 12}")
    built = matrix.load(path)
    record = runs.matrix_record(built, built.cells, 3)["design"]
    assert record["kind"] == "screening" and record["asked"] == {"runs": 12} and len(record["rows"]) == 12
    # another 12-run choice (the rows' levels flipped): taken as stored
    other = {**record, "rows": [[1 - v for v in r] for r in record["rows"]]}
    taken = matrix.load(path, stored_design=lambda name: other)
    assert taken.design is not None and {c.id for c in taken.cells} != {c.id for c in built.cells}
    stale = {**other, "asked": {"runs": 16}}
    again = matrix.load(path, stored_design=lambda name: stale)
    assert [c.id for c in again.cells] == [c.id for c in built.cells]


def test_expand_prints_the_screening_design(tmp_path: Path) -> None:
    done = invoke("matrix", "expand", str(five(tmp_path, "{kind: screening, runs: 12}")), "--results", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "design: a Plackett–Burman screening design of 5 settings: 12 of the full cross's 32 cells" in done.stdout
    assert "partially with the two-setting interactions" in done.stdout


def test_the_effects_of_a_screening_design_are_main_effects_only(tmp_path: Path) -> None:
    import math
    import random

    from conftest import typed
    from fsmatrix.results import store
    from fsmatrix.results.verdict import answer, answering
    from test_answer import runs as result_docs

    m = matrix.load(five(tmp_path, "{kind: screening, runs: 12}"))
    rnd, docs = random.Random(1), []
    for c in m.cells:
        high = str(matrix.flatten(c.params)["gtm.global_buffers"]) == "64"
        values = [10 * math.exp((0.5 if high else -0.5) * math.log(1.7) + rnd.gauss(0, 0.03)) for _ in (1, 2, 3)]
        docs += result_docs(c, values)
    record = store.RunMatrix.read(runs.matrix_record(m, m.cells, 3))
    group = answering.build(typed(docs), record, None, answer.Rule(draws=200)).groups[0]
    assert isinstance(group, answer.SpeedGroup) and group.effects is not None
    e = group.effects
    assert (e.kind, e.runs, e.full_runs) == ("screening", 12, 32) and e.interactions == ()
    assert len(e.effects) == 5 and e.family == 5
    by = {x.name: x for x in e.effects}
    assert (
        by["gtm.global_buffers"].words == "matters"
        and by["gtm.global_buffers"].ci_low < 1.7 < by["gtm.global_buffers"].ci_high
    )


# ----------------------------------------------------------------------------------- D-optimal

MIXED = """\
name: mixed
design: DESIGN
axes:
  filesystem: [ext2, ext3, ext4]
  mount_options: ["", data=journal, data=writeback]
  gtm.global_buffers: [64, 1000, 35000]
  gtm.journal: [before, nobefore]
  workload:
    - threen1: {start: 1, end: 1000, workers: 2, block: 100}
exclude:
  - {filesystem: ext2, mount_options: data=journal}
  - {filesystem: ext2, mount_options: data=writeback}
  - {filesystem: ext4, mount_options: data=journal}
  - {filesystem: ext4, mount_options: data=writeback}
repeat: 3
"""


def test_an_optimal_design_chooses_among_the_cells_exclude_leaves(tmp_path: Path) -> None:
    """Mixed levels and a setting that exists under one filesystem only (data= under ext3): the
    candidates are the 30 cells exclude leaves; the main model's terms those they can estimate (an
    intercept, filesystem × mount_options' 4, global_buffers' 2, journal's 1: 8)."""
    m = matrix.load(five(tmp_path, "{kind: optimal, runs: 12, model: main, seed: 7}", MIXED))
    full = matrix.load(five(tmp_path, "full", MIXED))
    assert isinstance(m.design, design.Optimal) and len(full.cells) == 30
    assert (m.design.runs, m.design.candidates, m.design.terms, m.design.seed) == (12, 30, 8, 7)
    assert {c.id for c in m.cells} <= {c.id for c in full.cells} and len(m.cells) == 12
    x = design.model_matrix(m.design.chosen, m.design.sizes, "main")
    import numpy as np

    assert np.linalg.matrix_rank(x) == 8  # every term estimable from the chosen cells
    # better per run than seeded random choices of 12 (the exchange works)
    cands = design.model_matrix(_candidates(m.design, full), m.design.sizes, "main")
    rng = np.random.default_rng(0)
    randoms = [design.d_efficiency(cands, list(rng.choice(30, 12, replace=False))) for _ in range(20)]
    assert m.design.efficiency >= max(randoms) and m.design.efficiency > 0
    again = matrix.load(five(tmp_path, "{kind: optimal, runs: 12, model: main, seed: 7}", MIXED))
    assert [c.id for c in again.cells] == [c.id for c in m.cells]  # seeded: the same every time
    inter = matrix.load(five(tmp_path, "{kind: optimal, runs: 24, model: interactions}", MIXED))
    assert isinstance(inter.design, design.Optimal) and inter.design.terms > 8 and inter.design.seed == 1


def _candidates(made: design.Optimal, full: matrix.Matrix) -> list[tuple[int, ...]]:
    values = {"filesystem": ["ext2", "ext3", "ext4"], "mount_options": ["", "data=journal", "data=writeback"]}
    values |= {"gtm.global_buffers": ["64", "1000", "35000"], "gtm.journal": ["before", "nobefore"]}
    out = []
    for c in full.cells:
        flat = matrix.flatten(c.params)
        out.append(tuple(values[a].index(str(flat[a])) for a in made.axes))
    return out


def test_a_two_level_optimal_half_is_an_orthogonal_fraction() -> None:
    """A known answer: for three two-level settings and the main model, the D-optimal 4 of 8 cells
    are a half fraction (I = ABC or I = −ABC), as informative per run as the whole cross (D-efficiency 1)."""
    cells = [(a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)]
    found = design.Candidates(("a", "b", "c"), (2, 2, 2), tuple(cells))
    made = design.optimal(design.DesignSpec("optimal", runs=4), found, None, fail)
    assert made.terms == 4 and abs(made.efficiency - 1) < 1e-9
    assert len({sum(c) % 2 for c in made.chosen}) == 1


def test_an_optimal_design_is_stored_and_never_chosen_again(tmp_path: Path) -> None:
    path = five(tmp_path, "{kind: optimal, runs: 12}", MIXED)
    built = matrix.load(path)
    record = runs.matrix_record(built, built.cells, 3)["design"]
    assert record["kind"] == "optimal" and record["asked"] == {"runs": 12, "model": "main", "seed": 1}
    assert record["seed"] == 1 and len(record["levels"]) == 12 and record["d_efficiency"] > 0
    # another choice recorded (the first 12 candidates): taken as stored, not chosen again
    (tmp_path / "full").mkdir()
    full = matrix.load(five(tmp_path / "full", "full", MIXED))
    assert isinstance(built.design, design.Optimal)
    other = {**record, "levels": [list(c) for c in _candidates(built.design, full)[:12]]}
    taken = matrix.load(path, stored_design=lambda name: other)
    assert [c.id for c in taken.cells] == [c.id for c in full.cells[:12]]
    for stale in ({**other, "asked": {**other["asked"], "seed": 2}}, {**other, "levels": [[0, 1, 0, 0]] * 12}):
        again = matrix.load(path, stored_design=lambda name, s=stale: s)  # type: ignore[misc]
        assert [c.id for c in again.cells] == [c.id for c in built.cells]


def test_expand_prints_the_d_efficiency_and_the_model(tmp_path: Path) -> None:
    path = five(tmp_path, "{kind: optimal, runs: 12}", MIXED)
    done = invoke("matrix", "expand", str(path), "--results", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "design: D-optimal for the main model (seed 1): 12 of the 30 candidate cells" in done.stdout
    assert "model: 8 terms: an intercept and each axis's levels (sum-to-zero contrasts)" in done.stdout
    assert "D-efficiency: " in done.stdout and "(det(X'X/12) / det(X'X/30))^(1/8)" in done.stdout


def test_a_mixed_level_optimal_group_has_no_effects_block_yet(tmp_path: Path) -> None:
    """Axes of three values: the two-level effects model does not apply (the search's per-level model
    in results/verdict/space.py does; the report does not use it yet). Two-level optimal designs get
    their effects: tests/results/test_effects.py."""
    from conftest import typed
    from fsmatrix.results import store
    from fsmatrix.results.verdict import answer, answering
    from test_answer import runs as result_docs

    m = matrix.load(five(tmp_path, "{kind: optimal, runs: 12}", MIXED))
    docs = [doc for i, c in enumerate(m.cells) for doc in result_docs(c, [10.0 + r + i for r in (1, 2)])]
    record = store.RunMatrix.read(runs.matrix_record(m, m.cells, 2))
    group = answering.build(typed(docs), record, None, answer.Rule(draws=200)).groups[0]
    assert isinstance(group, answer.SpeedGroup) and group.effects is None


BAD_OPTIMAL = [
    ("{kind: optimal, runs: 7}", "runs 7 is fewer than the main model's 8 terms over these axes; give runs: 8"),
    ("{kind: optimal, runs: 12, model: interactions}", "fewer than the interactions model's"),
    ("{kind: optimal, runs: 30}", "takes every one of the 30 cells; give design: full"),
    ("{kind: optimal, runs: 12, model: quadratic}", "model 'quadratic'; allowed: main, interactions"),
    ("{kind: optimal, runs: 12, resolution: 3}", "unknown keys resolution for optimal"),
    ("{kind: optimal, runs: 12, seed: x}", "seed 'x' must be an integer"),
    ("{kind: optimal}", "an optimal design takes runs: N"),
]


@pytest.mark.parametrize(("spec", "why"), BAD_OPTIMAL)
def test_bad_optimal_designs_are_one_line_and_exit_2(tmp_path: Path, spec: str, why: str) -> None:
    path = five(tmp_path, spec, MIXED)
    done = invoke("matrix", "expand", str(path), "--results", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{path}:2: " in lines[0] and "design" in lines[0] and why in lines[0], lines


def test_a_shard_runs_the_design_it_was_given(tmp_path: Path) -> None:
    """GitHub shards and Slurm tasks take the design the expanding step chose (``--design-from``: the
    record `matrix expand --format github` puts in every entry, or the submission's matrix.json), even
    where this machine would choose another; one given for another design or settings is refused, one line,
    exit 2, before any run."""
    path = five(tmp_path, "{kind: fractional, runs: 8}")
    built = matrix.load(path)
    assert built.design is not None
    other = {**built.design.record(), "words": [1, 2, 4, 1 | 2 | 4, 1 | 2]}
    entries = json.loads(invoke("matrix", "expand", str(path), "--format", "github").stdout)["include"]
    assert len(entries) == 8 and all(json.loads(e["design"]) == built.design.record() for e in entries)
    given = tmp_path / "design.json"
    given.write_text(json.dumps(other))
    record = runs.design_from(given)
    taken = matrix.load(path, stored_design=lambda name: record)
    runs.check_design_taken(taken, record, given)  # taken as given: no error
    assert {c.id for c in taken.cells} != {c.id for c in built.cells}
    # a run's matrix.json is read too (the Slurm submission's)
    (tmp_path / "matrix.json").write_text(json.dumps(runs.matrix_record(taken, taken.cells, 3)))
    assert runs.design_from(tmp_path / "matrix.json") == taken.design.record()
    results = tmp_path / "results"
    for content, why in (
        (json.dumps({**other, "asked": {"runs": 16}}), "was not made for"),  # the file asks for another now
        ("{", "not JSON"),
        ("[1, 2]", "no design in it"),
    ):
        given.write_text(content)
        done = invoke("run", str(path), "--backend", "host", "--results", str(results), "--design-from", str(given))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and str(given) in lines[0] and why in lines[0], lines
    given.write_text(json.dumps(other))
    (tmp_path / "full").mkdir()
    full = five(tmp_path / "full", "full")
    done = invoke("run", str(full), "--backend", "host", "--results", str(results), "--design-from", str(given))
    assert done.returncode == 2 and "a full cross" in done.stderr
    assert not results.exists() or not any(results.iterdir())
    # a cross's shards carry no design
    plain = json.loads(invoke("matrix", "expand", str(full), "--format", "github").stdout)["include"]
    assert all("design" not in e for e in plain)
