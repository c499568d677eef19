"""Estimated durations (issue 27, item 3): the median of a cell's stored passed runs on this host,
else the same workload and parameters on another filesystem, else unknown; the whole matrix is the
sum over the runs left."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from rich.console import Console

from fsmatrix import matrix, racing, runs
from fsmatrix.agent import job, jsonfile
from fsmatrix.backends import hostinfo
from fsmatrix.bench import estimates as bench_estimates
from fsmatrix.cli import main
from fsmatrix.matrix import MatrixCell
from fsmatrix.results import store
from fsmatrix.results.store import past_runs
from fsmatrix.results.verdict import estimate

HERE = hostinfo.machine_id()[0]
FIO = "{fio: {pattern: randread, record_size: 4K, file_size: 256M, runtime: 10}}"
TEXT = f"""\
name: est
axes: {{filesystem: [ext4, xfs, btrfs]}}
defaults: {{workload: {FIO}}}
repeat: 3
"""


def cells_of(tmp_path: Path, text: str = TEXT) -> tuple[Path, dict[str, MatrixCell]]:
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    return path, {c.spec.filesystem: c for c in matrix.load(path).cells}


def doc_for(cell: MatrixCell, repeat: int, seconds: float, status: str = "passed", host: str | None = HERE) -> Any:
    doc = job.result_document(
        job.CellRepeat(cell.spec, cell.id, repeat),
        status=status,
        reason=None,
        started_at="2026-11-26T00:00:00+00:00",
        provenance={"host": {"machine_id": host}},
    )
    doc["duration_s"] = seconds
    return doc


def write_indexed(root: Path, run_id: str, cell: MatrixCell, durations: list[float], **kwargs: Any) -> None:
    """Result documents as ``fsmatrix run`` leaves them, indexed (results/test_compare.py's write_run)."""
    index = store.RootStore(root)
    try:
        for repeat, seconds in enumerate(durations, 1):
            doc = doc_for(cell, repeat, seconds, **kwargs)
            doc["run_id"] = run_id
            path = store.result_path(root / run_id, cell.id, repeat)
            jsonfile.write_atomic(path, doc)
            index.add(run_id, doc, path)
    finally:
        index.close()


def test_median_of_own_runs_here_else_another_filesystem_else_unknown(tmp_path: Path) -> None:
    _, cells = cells_of(tmp_path)
    root = tmp_path / "results"
    write_indexed(root, "a", cells["ext4"], [10.0, 30.0, 12.0])
    write_indexed(root, "b", cells["ext4"], [14.0])  # another run id, the same cell: counted
    write_indexed(root, "c", cells["ext4"], [500.0], status="failed")  # not passed: not counted
    write_indexed(root, "d", cells["ext4"], [900.0], host="another-machine")  # another host: not counted
    write_indexed(root, "e", cells["xfs"], [99.0], host="another-machine")
    found = runs.cell_estimates(root, list(cells.values()))
    ext4, xfs, btrfs = found[cells["ext4"].id], found[cells["xfs"].id], found[cells["btrfs"].id]
    assert (ext4.seconds, ext4.runs, ext4.source, ext4.slowest_own_s) == (13.0, 4, "median of 4 runs", 30.0)
    # xfs's only run is another host's: it falls back to ext4's runs of the same workload, and says so
    assert (xfs.seconds, xfs.source) == (13.0, "from ext4, 4 runs")
    assert xfs.slowest_own_s is None
    assert (btrfs.seconds, btrfs.source) == (13.0, "from ext4, 4 runs")
    assert estimate.estimate("x", {"filesystem": "ext4", "workload": {"fio": {}}}, []).show() == "unknown"


def test_only_the_newest_runs_are_read(tmp_path: Path, monkeypatch: Any) -> None:
    """However many runs a root holds, `run` reads a bounded number of documents: the newest."""
    monkeypatch.setattr(past_runs, "RECENT_PER_CELL", 2)
    monkeypatch.setattr(past_runs, "RECENT_SIBLINGS", 1)
    _, cells = cells_of(tmp_path)
    root = tmp_path / "results"
    write_indexed(root, "old", cells["ext4"], [100.0, 100.0, 100.0])
    write_indexed(root, "new", cells["ext4"], [10.0, 20.0])
    write_indexed(root, "xfs-old", cells["xfs"], [7.0])
    write_indexed(root, "xfs-new", cells["xfs"], [9.0])
    ext4 = runs.cell_estimates(root, [cells["ext4"]])[cells["ext4"].id]
    assert (ext4.seconds, ext4.runs) == (15.0, 2)
    btrfs = runs.cell_estimates(root, [cells["btrfs"]])[cells["btrfs"].id]  # one sibling read: the newest
    assert (btrfs.source, btrfs.seconds) == ("from xfs, 1 run", 9.0)


def test_other_parameters_are_not_a_fallback(tmp_path: Path) -> None:
    _, cells = cells_of(tmp_path)
    _, other = cells_of(tmp_path, TEXT.replace("runtime: 10", "runtime: 20"))
    root = tmp_path / "results"
    write_indexed(root, "a", other["ext4"], [25.0])
    found = runs.cell_estimates(root, list(cells.values()))
    assert all(e.seconds is None and e.source == "unknown" for e in found.values())
    assert runs.cell_estimates(tmp_path / "nothing-here", list(cells.values()))[cells["ext4"].id].seconds is None


def test_total_is_the_sum_times_the_runs_left() -> None:
    found = {
        "a": estimate.Estimate(10.0, "median of 3 runs", 3),
        "b": estimate.Estimate(4.0, "from ext4, 2 runs", 2),
        "c": estimate.Estimate(None, "unknown"),
    }
    whole = estimate.total(found, {"a": 3, "b": 3, "c": 3})
    assert (whole.seconds, whole.runs, whole.unknown_runs) == (42.0, 9, 3)
    assert whole.show() == "estimated 42 s for 9 runs (3 of them unknown, not counted)"
    nothing = estimate.total({"a": estimate.Estimate(None, estimate.UNKNOWN)}, {"a": 3})
    assert nothing.show().startswith("no estimate for 3 runs")
    assert estimate.total(found, {"a": 1, "b": 2}).seconds == 18.0  # a resumed run: only what is left
    assert [estimate.duration(s) for s in (0.5, 42, 250, 7500)] == ["0.5 s", "42 s", "4 min 10 s", "2 h 05 min"]


def test_expand_shows_each_cells_estimate_and_the_total(tmp_path: Path) -> None:
    path, cells = cells_of(tmp_path)
    root = tmp_path / "results"
    write_indexed(root, "a", cells["ext4"], [10.0, 20.0])
    result = CliRunner().invoke(main, ["matrix", "expand", str(path), "--results", str(root)])
    assert result.exit_code == 0, result.output
    assert "15 s (median of 2 runs)" in result.stdout and "15 s (from ext4, 2 runs)" in result.stdout
    # The 3 cells are a comparison group, raced by default: at most 10 repeats (3 × 10 × 15 s), the
    # matrix's 3 at least.
    assert f"at most estimated 7 min 30 s for 30 runs (3 cells × 10), from the runs in {root}" in result.stdout
    assert "race: 3 to 10 repeats a cell" in result.stdout


class Instant:
    """A backend that runs nothing: every run passes at once, 'taking' 5 s."""

    name = "instant"

    def preflight(self, cells: list[MatrixCell]) -> None:
        pass

    def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
        return doc_for(cell, repeat, 5.0)

    def environment(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


def test_a_resumed_run_estimates_only_what_is_left(tmp_path: Path) -> None:
    path, cells = cells_of(tmp_path)
    root = tmp_path / "results"
    write_indexed(root, "est", cells["ext4"], [8.0, 8.0])  # this run's own first two ext4 repeats are done
    m = matrix.load(path)
    out = io.StringIO()
    console = Console(file=out, width=200)
    runs.run_matrix(m, m.cells, Instant(), runs.RunOptions(root, "est", racing.RunPlan.fixed(3)), console)  # type: ignore[arg-type]
    text = out.getvalue()
    assert f"estimate {cells['ext4'].id}: 8 s (median of 2 runs)" in text
    # 7 runs left (ext4 r3, xfs and btrfs r1..r3), each estimated from ext4's 8 s
    assert "estimated 56 s for 7 runs" in text


# ---------------------------------------------------------------------------------------------
# timeout: auto (issue 27, item 4)


def with_timeout(value: str) -> str:
    return TEXT.replace("defaults: {workload: " + FIO + "}", f"defaults: {{workload: {FIO}, timeout: {value}}}")


class Recording(Instant):
    """Instant, keeping the cells it was given (their limits)."""

    def __init__(self) -> None:
        self.given: list[MatrixCell] = []

    def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
        self.given.append(cell)
        return doc_for(cell, repeat, 5.0)


def run_auto(tmp_path: Path, history: list[float]) -> tuple[list[MatrixCell], dict[str, Any]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "auto.yaml"
    path.write_text(
        TEXT.replace("defaults: {workload: " + FIO + "}", "defaults: {workload: " + FIO + ", timeout: auto}")
    )
    m = matrix.load(path)
    ext4 = next(c for c in m.cells if c.spec.filesystem == "ext4")
    root = tmp_path / "results"
    if history:
        write_indexed(root, "earlier", ext4, history)
    backend = Recording()
    options = runs.RunOptions(root, "now", racing.RunPlan.fixed(1))
    runs.run_matrix(m, [ext4], backend, options, Console(file=io.StringIO()))  # type: ignore[arg-type]
    return backend.given, jsonfile.read(store.result_path(root / "now", ext4.id, 1))


def test_auto_timeout_is_three_times_the_slowest_stored_run(tmp_path: Path) -> None:
    given, doc = run_auto(tmp_path, [40.0, 100.0, 60.0, 55.5, 70.0])
    assert given[0].spec.timeout == 300  # 3 × 100 s
    assert given[0].spec.to_dict()["timeout"] == "auto"  # the id's form is unchanged by the limit
    assert (doc["timeout_s"], doc["timeout_source"]) == (300, "auto: 3x slowest of 5 stored runs (100.0 s)")
    assert doc["params"]["timeout"] == "auto"


def test_auto_timeout_has_a_floor_and_a_default_without_history(tmp_path: Path) -> None:
    given, doc = run_auto(tmp_path / "quick", [2.0])
    assert given[0].spec.timeout == estimate.AUTO_FLOOR_S == 60
    assert "raised to the floor of 60 s" in doc["timeout_source"]
    given, doc = run_auto(tmp_path / "none", [])
    assert given[0].spec.timeout == estimate.AUTO_DEFAULT_S == 3600
    assert doc["timeout_source"] == "auto: no stored passed run of this cell here; the default 3600 s"


def test_auto_timeout_cells_have_their_own_stable_id(tmp_path: Path) -> None:
    _, plain = cells_of(tmp_path)
    path = tmp_path / "auto.yaml"
    path.write_text(
        TEXT.replace("defaults: {workload: " + FIO + "}", "defaults: {workload: " + FIO + ", timeout: auto}")
    )
    auto = {c.spec.filesystem: c for c in matrix.load(path).cells}
    assert auto["ext4"].id != plain["ext4"].id and auto["ext4"].spec.timeout_auto
    assert auto["ext4"].id == matrix.load(path).cells[0].id
    _, same = cells_of(tmp_path, with_timeout("3600"))
    assert same["ext4"].id == plain["ext4"].id  # 3600 is the default: an explicit one changes nothing
    assert plain["ext4"].spec.to_dict()["timeout"] == 3600
    assert "timeout_s" in doc_for(plain["ext4"], 1, 1.0)


def test_a_bad_timeout_is_refused_with_file_line_and_value(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        TEXT.replace("defaults: {workload: " + FIO + "}", "defaults:\n  workload: " + FIO + "\n  timeout: soon")
    )
    result = CliRunner().invoke(main, ["matrix", "expand", str(path)])
    assert result.exit_code == 2
    assert f"{path}:5: timeout: 'soon' is not allowed; expected an integer >= 1 or 'auto'" in result.output
    assert "Traceback" not in result.output


def test_accuracy_sets_each_cell_against_the_estimate_it_had_before_the_run(tmp_path: Path, capsys: Any) -> None:
    """bench.estimates: the estimates come from every stored run but the one measured (run "next"),
    the actual is the median of that run's passed runs, and within ±30 % counts cells; a cell with
    no estimate is a miss."""
    path, cells = cells_of(tmp_path)
    root = tmp_path / "results"
    write_indexed(root, "first", cells["ext4"], [10.0, 10.0, 12.0])  # estimate 10 s
    write_indexed(root, "first", cells["xfs"], [20.0, 20.0, 20.0])  # estimate 20 s
    write_indexed(root, "next", cells["ext4"], [12.0, 13.0, 14.0])  # 13 s: +30 %, in
    write_indexed(root, "next", cells["xfs"], [27.0, 26.0, 28.0])  # 27 s: +35 %, out
    write_indexed(root, "next", cells["btrfs"], [5.0, 5.0, 5.0])  # no estimate of its own: from ext4, 10 s: -50 %, out
    m = matrix.load(path)
    jsonfile.write_atomic(root / "next" / "matrix.json", runs.matrix_record(m, m.cells, 3, None))

    rows, host = bench_estimates.load(root / "next", root)
    assert host == HERE
    by_fs = {a.cell_id: a for a in rows}
    ext4, xfs, btrfs = (by_fs[cells[f].id] for f in ("ext4", "xfs", "btrfs"))
    assert (ext4.estimate.seconds, ext4.actual_s, ext4.within()) == (10.0, 13.0, True)
    assert xfs.error() == 0.35 and not xfs.within()
    assert btrfs.estimate.source.startswith("from ext4") and not btrfs.within()
    assert bench_estimates.main([str(root / "next")]) == 0
    assert "1 of 3 cells within ±30% of their estimate (33%)" in capsys.readouterr().out
    # nothing stored but the run itself: every cell unknown, every one a miss
    lone = tmp_path / "lone"
    write_indexed(lone, "next", cells["ext4"], [12.0])
    jsonfile.write_atomic(lone / "next" / "matrix.json", runs.matrix_record(m, m.cells, 3, None))
    rows, _ = bench_estimates.load(lone / "next", lone)
    assert [a.error() for a in rows] == [None]


def test_accuracy_refuses_what_is_not_a_run_directory(tmp_path: Path, capsys: Any) -> None:
    assert bench_estimates.main([str(tmp_path / "missing")]) == 2
    assert bench_estimates.main([str(tmp_path)]) == 2
    assert bench_estimates.main([str(tmp_path), "--margin", "1.5"]) == 2
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "matrix.json").write_text('{"cells": [{"id": "ext4"}]}')
    assert bench_estimates.main([str(broken)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("bench.estimates: error: ") for line in err)
    assert "no such run directory" in err[0] and "no matrix.json" in err[1] and "--margin 1.5" in err[2]
    assert "matrix.json: cannot read its cells (one without an id and params: {'id': 'ext4'})" in err[3]
