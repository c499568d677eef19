"""The gate benchmark's bookkeeping and judging, on synthetic rounds (no runs): what it counts as a
false alarm and a detection, confirmation included, and its stored rounds judged again (--analyse)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import typed
from fsmatrix.agent import jsonfile
from fsmatrix.bench import gate as bench_gate
from fsmatrix.results.store import sides
from test_compare import make_doc

CELL = make_doc("x", 1, 1.0)["cell_id"]


def _side(label: str, values: list[float]) -> sides.Side:
    return sides.Side(label, typed(make_doc(label, i, v, cpu=v) for i, v in enumerate(values, 1)))


def _round(number: int, rng: np.random.Generator, stand_in: float, n: int = 5) -> bench_gate.Round:
    """Pairs drifting together by ±20 % between pairs, ±1 % within: the interleaved design's noise."""

    def batch(tag: str) -> dict[str, sides.Side]:
        drift = 10 * np.exp(rng.normal(0, 0.2, n))
        noisy = {side: drift * np.exp(rng.normal(0, 0.01, n)) for side in "abv"}
        noisy["v"] = noisy["v"] * (1 + stand_in)
        return {side: _side(f"r{number}-{side}{tag}", [float(x) for x in values]) for side, values in noisy.items()}

    return bench_gate.Round(number, batch(""), batch("2"), (0.5, 0.7))


def test_the_tally_counts_false_alarms_and_detections_per_form_of_the_gate() -> None:
    rng = np.random.default_rng(3)
    tally = bench_gate.Tally("gtm.sync_io=true", [0.1, 0.2], 0.05)
    for number in range(1, 7):
        tally.add(_round(number, rng, stand_in=0.15))
    gate = bench_gate.FORMS[0].name
    assert gate == "paired, confirmed (pr-gate.sh)"
    assert sum(tally.fails[("A/A (nothing changed)", gate)]) == 0
    for kind in tally.kinds[1:]:
        assert all(tally.fails[(kind, gate)]), kind  # 15 %, 10 %, 20 % against 1 % noise: always seen
    # The drift between pairs (±20 %) hides +10 % from independent samples, not from pairs.
    assert sum(tally.fails[("+10% on B", "unpaired, one batch")]) < 6
    assert tally.stand_in["elapsed_s"] and math.exp(np.mean(tally.stand_in["elapsed_s"])) == pytest.approx(1.15, 0.02)
    assert tally.rounds == 6 and "pass" in tally.last()


def test_confirmation_clears_a_first_batch_regression_that_does_not_hold() -> None:
    rng = np.random.default_rng(4)
    rnd = _round(1, rng, stand_in=0.0)
    rnd.first["v"] = _side("v", [(d.metrics["elapsed_s"] or 0) * 1.3 for d in rnd.first["a"].docs])
    for form in bench_gate.FORMS:
        first, second = (rnd.first["a"], rnd.first["v"]), (rnd.second["a"], rnd.second["v"])
        fails = bench_gate.judge(first, second, 0.05, form.paired)[1][form]
        assert fails == (form.paired and not form.confirm), form  # unpaired: 5 pairs drifting 20 % hide it


def _store(root: Path, rnd: bench_gate.Round) -> None:
    for suffix, batch in (("", rnd.first), ("2", rnd.second)):
        for side, s in batch.items():
            for doc in s.docs:
                jsonfile.write_atomic(
                    root / f"gate-r{rnd.number}-{side}{suffix}" / CELL / f"r{doc.repeat}.json", doc.document
                )
    info = {"cell_id": CELL, "load_before": rnd.loads[0], "load_after": rnd.loads[1]}
    (root / f"gate-r{rnd.number}.json").write_text(json.dumps(info))


def test_stored_rounds_are_judged_again_and_an_unfinished_one_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(5)
    for number in (1, 2):
        _store(tmp_path, _round(number, rng, stand_in=0.15))
    (tmp_path / "gate-r3-a" / CELL).mkdir(parents=True)  # round 3 was interrupted: no gate-r3.json
    assert bench_gate.main(["--analyse", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 rounds" in out and "| A/A (nothing changed) |" in out and "0/2 (0%" in out
    assert "load average before/after each round 0.50..0.70" in out
    assert "elapsed_s ×1.1" in out  # the stand-in's measured effect
    # a smaller design judged on the same runs: the first 3 and 4 pairs
    assert bench_gate.main(["--analyse", "--results", str(tmp_path), "--pairs", "3,4"]) == 0
    assert "3 pairs + 4 to confirm" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--analyse"], "no finished round"),
        (["--variant", "gtm.sync_io"], "expected KEY=VALUE"),
        (["--only", "nothing-*"], "matches 0 cells"),
        (["--repeats", "2"], "at least 3"),
        (["--threshold", "lots"], "threshold 'lots'"),
        (["--variant", "gtm.sync_io=false"], "changes nothing"),
        (["--analyse", "--pairs", "5"], "two counts of at least 3"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert bench_gate.main([*args, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
