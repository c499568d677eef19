"""The results benchmark's own code, fast: both measurements on a handful of documents in this
process (the new code only: no worker, no git archive), and a bad ``--against`` stopping it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsmatrix.bench import results as bench_results


def test_both_measurements_on_a_few_documents(tmp_path: Path) -> None:
    measured = bench_results.measure({"after": bench_results.in_process}, tmp_path, 20, 3, 1, warm=False)
    meta = {
        "date": "today",
        "before": "-",
        "after": "this tree",
        "python": "3",
        "cpus": 2,
        "load_average": {"before": [0.0, 0.0, 0.0], "after": [0.0, 0.0, 0.0]},
        "repeat": 1,
        "elapsed_s": 0.0,
    }
    text = bench_results.markdown(measured, meta)
    assert "loading and typing 20 result documents" in text
    assert "the report of a 3-cell run (9 documents)" in text
    assert [m.kind for m in measured] == ["load", "report"]
    assert measured[0].what["after"] == "20 documents, Result"
    assert all(len(m.seconds["after"]) == 1 and "before" not in m.seconds for m in measured)
    assert "1 groups" in measured[1].what["after"]  # 3 configurations of one comparison group
    doc = bench_results.to_json(measured, meta)
    assert [m["kind"] for m in doc["measurements"]] == ["load", "report"]


def test_the_made_run_forms_comparison_groups_with_a_baseline_each(tmp_path: Path) -> None:
    from fsmatrix.results import store

    bench_results.write_run_dir(tmp_path / "run", 30, bench_results.templates())
    cells = store.run_matrix(tmp_path / "run").cells
    assert len(cells) == len({c.id for c in cells}) == 30
    assert len({c.group for c in cells}) == 3
    assert sum(bool(c.baseline) for c in cells) == 3
    assert len(store.load_results(tmp_path / "run")) == 30 * bench_results.REPEATS


def test_a_bad_against_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_results.main(["--against", "not-a-commit-0000", "--documents", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and "not-a-commit-0000" in err and "not a commit" in err
