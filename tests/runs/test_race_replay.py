"""Racing measured by replay (issue 25, item 4): ``python -m fsmatrix.bench.race`` on stored runs.

Synthetic groups go through the functions the command uses once it has loaded a run directory
(``race.measure`` on a ``race.StoredGroup``); the command itself runs on a small run directory
written here. Nothing is run, formatted or mounted: fast, and no root needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fsmatrix import matrix, runs
from fsmatrix.agent import job, jsonfile
from fsmatrix.bench import race
from fsmatrix.errors import UserError
from fsmatrix.results.verdict import race as race_rule


def group(medians: dict[str, float], sigma: float, n: int = 15, seed: int = 1) -> race.StoredGroup:
    rng = np.random.default_rng(seed)
    samples = {c: [float(x) for x in m * np.exp(rng.normal(0.0, sigma, n))] for c, m in medians.items()}
    return race.StoredGroup("threen1 test", "elapsed_s", "lower", samples)


def test_a_clear_winner_replays_to_its_decision_with_a_few_of_the_runs() -> None:
    g = group({"fast": 10.0, "slow": 20.0, "slower": 30.0}, sigma=0.03)
    out = race.measure(g, race.ReplayPlan(replays=40))
    assert out.decision == {"fast"} and out.best == "fast"
    assert out.agreeing == 40
    shares = [r.runs_used / out.runs_fixed for r in out.replays]
    assert max(shares) <= 0.4  # the losers leave after a few rounds: 15 + 2 × 3..4 of 45 runs
    assert out.runs_fixed == 45


def test_the_replays_stop_early_and_draw_the_runs_in_different_orders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails if a replay used the full data every time, or the stored order instead of a random one."""
    g = group({"fast": 10.0, "slow": 20.0}, sigma=0.03)
    firsts: set[float] = set()
    real = race_rule.race_look

    def spy(samples: Any, *args: Any, **kwargs: Any) -> Any:
        for cell, values in samples.items():
            assert len(set(values)) == len(values)  # without replacement
            assert set(values) <= set(g.samples[cell])
        firsts.add(samples["fast"][0])
        return real(samples, *args, **kwargs)

    monkeypatch.setattr(race_rule, "race_look", spy)
    out = race.measure(g, race.ReplayPlan(replays=20))
    assert all(r.runs_used < out.runs_fixed for r in out.replays)
    assert all(r.rounds < 15 for r in out.replays)
    assert len(firsts) > 5  # each replay starts from another run


def test_identical_cells_all_survive() -> None:
    g = group({"a": 10.0, "b": 10.0, "c": 10.0}, sigma=0.05, seed=7)
    out = race.measure(g, race.ReplayPlan(replays=30))
    assert out.decision == {"a", "b", "c"}
    assert all(r.survivors == {"a", "b", "c"} for r in out.replays)
    assert out.agreeing == 30


def test_disagreements_by_kind() -> None:
    best, full = "a", frozenset({"a", "b"})
    assert race.kind_of(frozenset({"a", "b"}), full, best) == race.AGREE
    assert race.kind_of(frozenset({"b", "c"}), full, best) == "retired the full-data best"
    assert race.kind_of(frozenset({"a"}), full, best) == "retired a cell the full data keeps"
    assert race.kind_of(frozenset({"a", "b", "c"}), full, best) == "kept an extra cell"
    assert race.kind_of(frozenset({"a", "c"}), full, best) == "kept and retired other cells"


def test_the_same_seed_replays_the_same() -> None:
    g = group({"fast": 10.0, "mid": 11.0, "slow": 13.0}, sigma=0.08)
    a, b = (race.measure(g, race.ReplayPlan(replays=10, seed=3)) for _ in range(2))
    assert a.replays == b.replays


def test_too_few_runs_or_bad_settings_are_refused() -> None:
    with pytest.raises(UserError, match="fewer than 15 passed runs in short"):
        race.measure(_short(), race.ReplayPlan(replays=1))
    with pytest.raises(UserError, match="--max-repeats"):
        race.measure(group({"a": 1.0, "b": 1.0}, 0.05), race.ReplayPlan(replays=1, max_repeats=16))


def _short() -> race.StoredGroup:
    g = group({"ok": 1.0, "short": 1.0}, 0.05)
    return race.StoredGroup(g.label, g.metric, g.direction, {"ok": g.samples["ok"], "short": g.samples["short"][:14]})


# ----------------------------------------------------------------------------------- the command


def write_run(root: Path, repeats: int) -> Path:
    """A run directory as ``fsmatrix run`` leaves it: matrix.json and one document per run (3n+1 on
    ext4 and xfs, xfs twice as slow)."""
    doc = {
        "name": "replay",
        "axes": {"filesystem": ["ext4", "xfs"]},
        "defaults": {"workload": {"threen1": {"start": 1, "end": 1000, "workers": 1, "block": 100}}},
    }
    m = matrix.expand_document(doc, "replay")
    run_dir = root / "replay"
    jsonfile.write_atomic(run_dir / "matrix.json", runs.matrix_record(m, m.cells, repeats))
    rng = np.random.default_rng(0)
    for cell, scale in zip(m.cells, (1.0, 2.0), strict=True):
        for r in range(1, repeats + 1):
            result = {
                "schema_version": job.SCHEMA_VERSION,
                "cell_id": cell.id,
                "repeat": r,
                "workload": "threen1",
                "params": cell.params,
                "status": "passed",
                "metrics": {"elapsed_s": scale * float(np.exp(rng.normal(0, 0.03)))},
                "provenance": {"hostname": "test"},
            }
            jsonfile.write_atomic(run_dir / cell.id / f"r{r}.json", result)
    return run_dir


def test_the_command_prints_the_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert race.main([str(write_run(tmp_path, 15)), "--replays", "20"]) == 0
    out = capsys.readouterr().out
    assert "agreement with the full-data decision: 20/20 (100%" in out
    assert "| ext4-threen1-" in out and "| best |" in out and "| retired |" in out


@pytest.mark.parametrize("repeats", [None, 3])
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], repeats: int | None
) -> None:
    path = tmp_path / "missing" if repeats is None else write_run(tmp_path, repeats)
    assert race.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bench.race: error: ")
    assert ("no such run directory" if repeats is None else "fewer than 15 passed runs") in err
