"""``python -m fsmatrix.bench.bisect`` at a tiny size (2 commits, 1 bisect, a small 3n+1 cell on the
host backend): it makes its repository, injects the regression, bisects for real and prints the
table. The realistic size (16 commits, 10 bisects) is measured on a quiet machine (docs/bisect.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import needs_root
from fsmatrix.bench import bisect as bench_bisect
from test_bisect_git import MATRIX, ONLY

pytestmark = [needs_root, pytest.mark.system]


def test_the_bisect_benchmark_runs_at_a_tiny_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.yaml").write_text(MATRIX)
    status = bench_bisect.main(
        ["--bisects", "1", "--commits", "2", "--effect", "1.0", "--seed", "3", "--matrix", str(tmp_path / "m.yaml"),
         "--only", ONLY, "--results", str(tmp_path / "results"), "--workdir", str(tmp_path / "work")]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0
    assert out.startswith("Bisect benchmark: 2 commits, a 100% regression injected at a random commit")
    assert "| 1 | 1/1 (100%, 95 % CI 3%-100%) | 1/1 (100%, 95 % CI 3%-100%) | 0/1 (0%" in out
    assert not (tmp_path / "work" / "bisect").exists()
