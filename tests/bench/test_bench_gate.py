"""The gate benchmark's bookkeeping and judging, on synthetic rounds (no runs): what it counts as a
false alarm and a detection, confirmation included, and its stored rounds judged again (--analyse)."""

from __future__ import annotations

import json
import math
import os
import time
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
    assert gate == "paired, confirmed"
    assert sum(tally.fails[("A/A (nothing changed)", gate)]) == 0
    for kind in tally.kinds[1:]:
        assert all(tally.fails[(kind, gate)]), kind  # 15 %, 10 %, 20 % against 1 % noise: always seen
    # The drift between pairs (±20 %) hides +10 % from independent samples, not from pairs.
    assert sum(tally.fails[("+10% on B", "unpaired, one batch")]) < 6
    assert tally.stand_in["elapsed_s"] and math.exp(np.mean(tally.stand_in["elapsed_s"])) == pytest.approx(1.15, 0.02)
    assert tally.rounds == 6 and "pass" in tally.last()


def test_the_designs_are_judged_on_the_first_pairs_of_each_look() -> None:
    """Rounds of 9 pairs: the fixed design looks at 3, the sequential one at 3, 6 and 9 until it decides;
    a FAIL is confirmed by the second batch. Pairs at ±1 % within, ±20 % between: +10 % is seen."""
    rng = np.random.default_rng(6)
    designs = bench_gate.gate_designs.designs(3, 3, 9, 5)
    tally = bench_gate.Tally("gtm.sync_io=true", [0.1], 0.05, repeats=3, designs=designs)
    for number in range(1, 5):
        tally.add(_round(number, rng, stand_in=0.15, n=9))
    fixed, sequential = (d.name for d in designs)
    assert all(v == "PASS" for v in tally.outcomes[("A/A (nothing changed)", sequential)].verdicts)
    for design in (fixed, sequential):
        detected = tally.outcomes[("+10% on B", design)]
        assert detected.verdicts == ["FAIL"] * 4 and set(detected.pairs) <= {3 + 5, 6 + 5, 9 + 5}
    assert len(tally.spreads["elapsed_s"]) == 4 and max(tally.spreads["elapsed_s"]) < 0.05
    table = "\n".join(bench_gate.design_table(tally.kinds, designs, tally.outcomes))
    assert f"| {sequential} | A/A (nothing changed) | 0/4 (0%" in table


def test_simulated_mode_prints_each_spread(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_gate.main(["--simulate", "0.05,0.14", "--rounds", "20"]) == 0
    out = capsys.readouterr().out
    assert "Pair spread 5.0%:" in out and "Pair spread 14.0%:" in out
    assert "| sequential 8:4:24 +8 | +5% (at the threshold) |" in out


def test_the_cpu_hogs_run_pinned_and_end() -> None:
    with bench_gate.cpu_hogs(1) as pids:
        assert len(pids) == 1
        deadline = time.monotonic() + 10  # the hog pins itself once its Python has started
        while os.sched_getaffinity(pids[0]) != {0} and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.sched_getaffinity(pids[0]) == {0}
    assert not Path(f"/proc/{pids[0]}").exists() or "Z" in Path(f"/proc/{pids[0]}/stat").read_text().split()[2]


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
        (["--simulate", "much"], "--simulate 'much': expected pair spreads"),
        (["--step", "0"], "--step must be at least 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert bench_gate.main([*args, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_stand_in_may_be_a_settings_file_keeping_the_cell_id(tmp_path: Path) -> None:
    """--settings FILE: V is the same cell (same id) with the file's settings laid over it, as
    `fsmatrix run --settings` lays a build's over a gate side; a file changing nothing is refused."""
    repo = Path(__file__).resolve().parents[2]
    settings = tmp_path / "more-bytes.yaml"
    settings.write_text("mount_options: data=journal\n")
    cells = bench_gate.setup(repo / "matrix/pr.yaml", bench_gate.DEFAULT_ONLY, "gtm.sync_io=true", settings)
    assert cells.build is not None and cells.variant.cells[0].id == cells.cell_id
    assert cells.variant.cells[0].spec.mount_options == "data=journal" and cells.base.cells[0].spec.mount_options == ""
    same = tmp_path / "same.yaml"
    same.write_text("gtm.block_size: 4096\n")
    with pytest.raises(bench_gate.UserError, match="changes nothing"):
        bench_gate.setup(repo / "matrix/pr.yaml", bench_gate.DEFAULT_ONLY, "gtm.sync_io=true", same)
    # the stand-in measurements.md's tables use
    shipped = bench_gate.setup(
        repo / "matrix/pr.yaml", bench_gate.DEFAULT_ONLY, "gtm.sync_io=true", bench_gate.WORK_CHANGE
    )
    assert (
        shipped.variant.cells[0].params["gtm"]["block_size"] == 8192 and shipped.variant.cells[0].id == shipped.cell_id
    )


def test_the_gate_bench_judges_time_and_work_together() -> None:
    """The bench's judged metrics: time's declared ones and the work metrics both sides measured."""
    docs = typed(make_doc("a", i, 10.0) for i in range(1, 4))
    side = sides.Side("a", docs)
    assert bench_gate.judged_metrics(side, side) == ["elapsed_s", "cpu_busy_s", "device_write_bytes_per_op"]


def test_a_round_stops_adding_pairs_once_the_sequential_design_stopped_on_every_comparison(tmp_path: Path) -> None:
    """The first batch grows look by look (8, 12, ... 24 pairs): past the look where the sequential design
    stopped on A/A, the stand-in and every slowdown, no design would use another pair."""
    design = bench_gate.gate_designs.designs(8, 4, 24, 8)[-1]
    tally = bench_gate.Tally("v", [0.1, 0.2], 0.05, 8, (design,))
    rng = np.random.default_rng(3)

    def stored(within: float, root: Path) -> None:
        drift = 10 * np.exp(rng.normal(0, 0.2, 8))
        noisy = {side: drift * np.exp(rng.normal(0, within, 8)) for side in "abv"}
        noisy["v"] = noisy["v"] * 1.3
        for side, values in noisy.items():
            for doc in _side(f"r1-{side}", [float(x) for x in values]).docs:
                jsonfile.write_atomic(root / f"gate-r1-{side}" / CELL / f"r{doc.repeat}.json", doc.document)

    stored(0.005, tmp_path / "quiet")  # every comparison decided at the first look
    assert bench_gate.every_design_stopped(tmp_path / "quiet", 1, CELL, design, tally)(8)
    stored(0.15, tmp_path / "noisy")  # A/A cannot be shown inside ±5 % from 8 pairs this noisy
    stopped = bench_gate.every_design_stopped(tmp_path / "noisy", 1, CELL, design, tally)
    assert not stopped(8) and stopped(24)


def test_run_round_makes_the_looks_pairs_until_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Which runs a round asks for (``runs.run_matrix`` recorded, not run: the loop's bookkeeping): the
    first batch's triples look by look until ``stopped``, then the confirmation batch; gate-rN.json says
    how many pairs the first batch has."""
    made: list[tuple[str, int]] = []

    def recorded(
        m: object, cells: object, backend: object, options: bench_gate.runs.RunOptions, console: object
    ) -> None:
        made.append((options.run_id, options.plan.repeat))

    monkeypatch.setattr(bench_gate.runs, "run_matrix", recorded)
    repo = Path(__file__).resolve().parents[2]
    cells = bench_gate.setup(repo / "matrix/pr.yaml", bench_gate.DEFAULT_ONLY, "gtm.sync_io=true")
    args = bench_gate._parser().parse_args(["--results", str(tmp_path), "--confirm-repeats", "3"])
    args.looks = (8, 12, 16, 20, 24)
    bench_gate.run_round(1, args, cells, None, None, lambda pairs: pairs >= 12)  # type: ignore[arg-type]
    first = [r for run_id, r in made if run_id == "gate-r1-a"]
    assert first == list(range(1, 13)) and [r for run_id, r in made if run_id == "gate-r1-v2"] == [1, 2, 3]
    assert made[:3] == [("gate-r1-a", 1), ("gate-r1-b", 1), ("gate-r1-v", 1)]  # interleaved
    assert json.loads((tmp_path / "gate-r1.json").read_text())["first_pairs"] == 12
