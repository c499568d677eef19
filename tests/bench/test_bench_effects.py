"""``python -m fsmatrix.bench.effects`` (runner/fsmatrix/bench/effects.py), tiny: every design and CV
a row, the repeats it was asked for, and bad counts refused with exit 2."""

from __future__ import annotations

import pytest

from fsmatrix.bench import effects as bench_effects


def test_a_few_trials_at_more_repeats(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_effects.main(["--trials", "2", "--repeats", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 repeats" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "design" not in line]
    assert len(rows) == len(bench_effects.PLANS) * len(bench_effects.CVS)


@pytest.mark.parametrize("args", [["--repeats", "1"], ["--trials", "0"]])
def test_bad_counts_are_refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_effects.main(args) == 2
    assert "at least" in capsys.readouterr().err
