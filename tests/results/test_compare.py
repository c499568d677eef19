"""`fsmatrix compare` and the regression gate: verdicts, exit codes, provenance refusal, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from fsmatrix.agent.job import SCHEMA_VERSION
from fsmatrix.agent.provenance import WORK_MEASUREMENT
from fsmatrix.cli import main
from fsmatrix.results import store
from fsmatrix.results.store import Result
from fsmatrix.results.verdict import gate, metrics, stats

PROVENANCE = {
    "backend": "host",
    "accel": "none",
    "kernel": "6.1.0-test",
    "image": None,
    "device_source": "loop",
    "cpu_model": "Test CPU",
    "cpu_count": 2,
    "memory_kib": 8_000_000,
    "git": {"sha": "0" * 40, "dirty": False},
}
CELL = "ext4-threen1-1-1000-w4-00000000"


def make_doc(
    run_id: str,
    repeat: int,
    elapsed: float,
    *,
    cell: str = CELL,
    status: str = "passed",
    cpu: float = 2.0,
    **prov: Any,
) -> dict[str, Any]:
    """A schema-1 result document of a 3n+1 cell with the given elapsed time (work: 100,000 updates)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "cell_id": cell,
        "repeat": repeat,
        "workload": "threen1",
        "params": {"filesystem": "ext4", "mkfs_options": "", "mount_options": "", "workload": {"threen1": {}}},
        "status": status,
        "reason": None,
        "started_at": f"2026-01-0{min(repeat, 9)}T00:00:00+00:00",
        "duration_s": elapsed + 1,
        "metrics": {
            "elapsed_s": elapsed,
            "updates_per_s": 100_000 / elapsed,
            "cpu_busy_s": cpu,
            "device_write_bytes": 1_000_000,
            "device_write_bytes_per_op": 10.0,
            "device_writes": 100,
            "device_reads": 0,
        },
        "key_metrics": {"elapsed_s": "lower", "updates_per_s": "higher", "cpu_busy_s": "lower"},
        "verification": {"status": "passed"},
        "samples": {"series": []},
        "provenance": {**PROVENANCE, **prov},
    }


def write_run(root: Path, run_id: str, values: list[float], **kwargs: Any) -> Path:
    """Write one document per value as RUN_ID/<cell>/rN.json, indexed; return the run directory."""
    index = store.RootStore(root)
    try:
        for i, value in enumerate(values, 1):
            doc = make_doc(run_id, i, value, **kwargs)
            path = root / run_id / doc["cell_id"] / f"r{i}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc), encoding="utf-8")
            index.add(run_id, doc, path)
    finally:
        index.close()
    return root / run_id


def samples(centre: float, n: int = 5, seed: int = 0, cv: float = 0.02) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in centre * np.exp(rng.normal(0, cv, n))]


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize(
    ("effect", "status", "verdict"),
    [(0.0, 0, "no change"), (0.03, 3, None), (0.10, 1, "slower"), (0.30, 1, "slower"), (-0.3, 0, "faster")],
)
def test_gate_exit_status_for_known_effects(tmp_path: Path, effect: float, status: int, verdict: str | None) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1))
    head = write_run(tmp_path, "head", [v * (1 + effect) for v in samples(10.0, seed=2)])
    result = invoke("compare", str(base), str(head), "--fail-on-regression", "5%", "--format", "json")
    assert result.exit_code == status, result.output
    rows = {r["metric"]: r for r in json.loads(result.output)["rows"]}
    assert set(rows) == {"elapsed_s", "updates_per_s", "cpu_busy_s", "device_write_bytes_per_op", "device_ios_per_op"}
    if verdict:
        assert rows["elapsed_s"]["verdict"] == verdict
        assert rows["updates_per_s"]["verdict"] == verdict  # same change seen through the rate
    assert rows["cpu_busy_s"]["verdict"] == "no change"
    assert not rows["elapsed_s"]["regression"] or effect > 0.05


def test_without_threshold_the_gate_never_fails(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1))
    head = write_run(tmp_path, "head", samples(13.0, seed=2))
    result = invoke("compare", str(base), str(head))
    assert result.exit_code == 0
    assert "slower" in result.output


def test_run_ids_are_looked_up_in_the_index(tmp_path: Path) -> None:
    write_run(tmp_path, "base", samples(10.0, seed=1))
    write_run(tmp_path, "head", samples(13.0, seed=2))
    result = invoke("compare", "base", "head", "--results", str(tmp_path), "--fail-on-regression", "0.05")
    assert result.exit_code == 1
    assert "GATE FAILED" in result.output
    md = invoke("compare", "base", "head", "--results", str(tmp_path), "--format", "md")
    assert md.output.startswith("## fsmatrix compare: base → head")
    assert "| ext4-threen1" in md.output


def test_too_few_runs_is_not_enough_data_and_not_decided(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", [10.0, 10.1])
    head = write_run(tmp_path, "head", [20.0, 20.1])
    result = invoke("compare", str(base), str(head), "--fail-on-regression", "5%", "--format", "json")
    assert result.exit_code == 3  # no FAIL, and no PASS either: nothing was shown
    assert json.loads(result.output)["verdict"] == "NOT DECIDED"
    assert {r["verdict"] for r in json.loads(result.output)["rows"]} == {"not enough data"}


def test_failed_runs_do_not_count(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1))
    head = write_run(tmp_path, "head", samples(13.0, seed=2), status="failed")
    result = invoke("compare", str(base), str(head), "--fail-on-regression", "5%", "--format", "json")
    assert result.exit_code == 3
    assert {r["verdict"] for r in json.loads(result.output)["rows"]} == {"not enough data"}


@pytest.mark.parametrize(
    ("key", "value"),
    [("kernel", "6.12.0-other"), ("cpu_model", "Other CPU"), ("memory_kib", 4_000_000), ("accel", "kvm")],
)
def test_incomparable_environments_are_refused(tmp_path: Path, key: str, value: Any) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1))
    head = write_run(tmp_path, "head", samples(10.0, seed=2), **{key: value})
    result = CliRunner().invoke(main, ["compare", str(base), str(head)])
    assert result.exit_code == 2
    assert "refusing to compare" in result.output and key in result.output and str(value) in result.output
    allowed = CliRunner().invoke(main, ["compare", str(base), str(head), "--allow-env-diff"])
    assert allowed.exit_code == 0
    assert f"{key}: base" in allowed.output  # the difference is printed even when allowed


def test_git_sha_differences_are_not_environment_differences(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1))
    head = write_run(tmp_path, "head", samples(10.0, seed=2), git={"sha": "1" * 40, "dirty": True})
    assert invoke("compare", str(base), str(head)).exit_code == 0


def test_bad_inputs_give_clear_errors(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1))
    cases: list[tuple[list[str], str]] = [
        ([str(tmp_path / "missing"), str(base)], "no such results directory"),
        ([str(base), "no-such-run", "--results", str(tmp_path)], "no run with that id"),
        ([str(base), str(base), "--fail-on-regression", "lots"], "expected a percentage"),
        ([str(base), str(base), "--fail-on-regression", "5"], "write 5% for a percentage"),
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    cases.append(([str(base), str(empty)], "no result documents"))
    old = write_run(tmp_path / "v0", "old", samples(10.0))
    doc_path = next(old.rglob("r1.json"))
    doc = json.loads(doc_path.read_text())
    doc["schema_version"] = 0
    doc_path.write_text(json.dumps(doc))
    cases.append(([str(base), str(old)], "schema version 0"))
    other = write_run(tmp_path / "other", "other", samples(10.0), cell="xfs-threen1-1-1000-w4-11111111")
    cases.append(([str(base), str(other)], "no cell in common"))
    garbage = tmp_path / "garbage" / "c" / "r1.json"
    garbage.parent.mkdir(parents=True)
    garbage.write_text("{not json")
    cases.append(([str(base), str(garbage.parent.parent)], "not a readable result document"))
    for args, message in cases:
        result = CliRunner().invoke(main, ["compare", *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output


def test_cells_on_one_side_only_are_listed(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1))
    write_run(tmp_path, "base", samples(10.0, seed=3), cell="xfs-threen1-1-1000-w4-11111111")
    head = write_run(tmp_path, "head", samples(10.0, seed=2))
    result = invoke("compare", str(base), str(head))
    assert result.exit_code == 0
    assert "only in base (not compared): xfs-threen1-1-1000-w4-11111111" in result.output


def test_ios_per_op_is_derived_from_bytes_per_op() -> None:
    doc = make_doc("r", 1, 10.0)
    # 1,000,000 bytes / 10 bytes per op = 100,000 ops; 100 IOs over them
    assert metrics.metric_value(Result.read(doc), "device_ios_per_op") == pytest.approx(0.001)
    doc["metrics"]["device_write_bytes"] = 0
    assert metrics.metric_value(Result.read(doc), "device_ios_per_op") is None


HOST = {"machine_id": "0123456789abcdef", "cpu_model": "Test CPU A", "cpu_count": 2, "kernel": "6.1.0-test"}


def test_compare_refuses_results_from_two_hosts(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1), host=HOST)
    head = write_run(tmp_path, "head", samples(10.0, seed=2), host={**HOST, "cpu_model": "Test CPU B"})
    same = write_run(tmp_path, "same", samples(10.0, seed=3), host=HOST)
    runner = CliRunner()
    refused = runner.invoke(main, ["compare", str(base), str(head)], catch_exceptions=False)
    assert refused.exit_code == 2
    assert "different environments" in refused.output and "host.cpu_model" in refused.output
    assert "Test CPU A" in refused.output and "Test CPU B" in refused.output
    allowed = runner.invoke(main, ["compare", str(base), str(head), "--allow-env-diff", "--format", "json"])
    assert allowed.exit_code == 0 and json.loads(allowed.output)["env_diffs"][0]["key"] == "host.cpu_model"
    assert runner.invoke(main, ["compare", str(base), str(same)]).exit_code == 0
    # A different machine with the same CPU model is another host too.
    other = write_run(tmp_path, "other", samples(10.0, seed=4), host={**HOST, "machine_id": "fedcba9876543210"})
    assert "host.machine_id" in runner.invoke(main, ["compare", str(base), str(other)]).output


def _head_writing(root: Path, per_op: float, **prov: Any) -> Path:
    """A head run whose device bytes written per operation are ``per_op`` (+ a little noise), time as
    usual (``prov``: its provenance beside PROVENANCE)."""
    index = store.RootStore(root)
    try:
        for i, value in enumerate(samples(10.0, seed=2), 1):
            doc = make_doc("head", i, value, **prov)
            doc["metrics"]["device_write_bytes_per_op"] = per_op + i / 100
            path = root / "head" / CELL / f"r{i}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc), encoding="utf-8")
            index.add("head", doc, path)
    finally:
        index.close()
    return root / "head"


def test_only_the_declared_metrics_and_work_fail_the_gate(tmp_path: Path) -> None:
    """3n+1 gates elapsed_s and cpu_busy_s, and the gate the work metrics both sides measured: 50 % more
    device bytes per update fail it though the time held; the rates of the same time stay advisory."""
    base = write_run(tmp_path, "base", samples(10.0, seed=1))
    head = _head_writing(tmp_path, 15.0)
    result = invoke("compare", str(base), str(head), "--fail-on-regression", "5%", "--format", "json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.output)
    rows = {r["metric"]: r for r in doc["rows"]}
    assert rows["device_write_bytes_per_op"]["gated"] and rows["device_write_bytes_per_op"]["regression"]
    assert rows["device_write_bytes_per_op"]["threshold"] == gate.WORK_THRESHOLDS["device_write_bytes_per_op"]
    assert [m for m, r in rows.items() if r["gated"]] == ["elapsed_s", "cpu_busy_s", "device_write_bytes_per_op"]
    assert not rows["updates_per_s"]["gated"] and not rows["elapsed_s"]["regression"]
    table = invoke("compare", str(base), str(head), "--fail-on-regression", "5%", "--format", "md")
    # the FAIL names the metric, its ratio and interval, and its own threshold
    assert "GATE FAILED: 1 regression(s)" in table.output
    assert f"{CELL} device_write_bytes_per_op ×1.5" in table.output and "threshold +2.0%)" in table.output
    # not gated (off): advisory again, and the gate passes on time
    off = ["--work-threshold", "device_write_bytes_per_op=off"]
    table = invoke("compare", str(base), str(head), "--fail-on-regression", "5%", *off)
    assert table.exit_code == 0 and "advisory" in table.output and "gate PASSED" in table.output
    # its own threshold above the change: shown below it, PASS
    assert (
        invoke(
            "compare",
            str(base),
            str(head),
            "--fail-on-regression",
            "5%",
            "--work-threshold",
            "device_write_bytes_per_op=60%",
        ).exit_code
        == 0
    )
    # The run's own CPU-seconds are gated: a rise there fails the gate though the time held.
    cpu = write_run(tmp_path / "cpu", "head", samples(10.0, seed=2), cpu=2.5)
    assert invoke("compare", str(base), str(cpu), "--fail-on-regression", "5%").exit_code == 1


def test_gated_p_values_are_corrected_across_cells(tmp_path: Path) -> None:
    """A +5 % change that Mann-Whitney alone calls (p = 0.008, Holm over the cell's two gated
    metrics: 0.016) is no longer significant once Holm counts five such cells (ten tests)."""
    base_values = [10.0, 10.1, 9.9, 10.2, 9.8]
    head_values = [10.5, 10.6, 10.4, 10.7, 10.3]  # every head run slower than every base run
    cells = [f"{c}-00000000" for c in "abcde"]
    for cell in cells:
        write_run(tmp_path / "all", "base", base_values, cell=cell)
        write_run(tmp_path / "all", "head", head_values, cell=cell)
    write_run(tmp_path / "one", "base", base_values, cell=cells[0])
    write_run(tmp_path / "one", "head", head_values, cell=cells[0])

    def rows(where: str) -> list[dict[str, Any]]:
        out = invoke("compare", str(tmp_path / where / "base"), str(tmp_path / where / "head"), "--format", "json")
        return [r for r in json.loads(out.output)["rows"] if r["gated"] and r["metric"] == "elapsed_s"]

    (alone,) = rows("one")
    assert alone["p_value"] < 0.01 and alone["p_holm"] == pytest.approx(2 * alone["p_value"])
    assert alone["verdict"] == "slower"
    five = rows("all")
    assert len(five) == 5 and all(r["p_holm"] >= 0.05 and r["verdict"] == "no change" for r in five)


def _with_work(run: Path, metric: str, values: list[float | None]) -> None:
    """Set ``metric`` in each of the run's documents, in repeat order (None: not measured)."""
    for path, value in zip(sorted(run.rglob("r*.json")), values, strict=True):
        doc = json.loads(path.read_text())
        doc["metrics"][metric] = value
        path.write_text(json.dumps(doc))


def test_work_tests_join_times_holm_family(tmp_path: Path) -> None:
    """Every gated row, time's and work's, is adjusted together: Holm over all of them."""
    base = write_run(tmp_path / "b", "base", samples(10.0, n=8, seed=1, cv=0.01))
    head = write_run(tmp_path / "h", "head", samples(10.0, n=8, seed=2, cv=0.01))
    for run, seed in ((base, 3), (head, 4)):
        _with_work(run, "fsyncs_per_op", samples(0.0002, n=8, seed=seed, cv=0.02))
    args = ["compare", str(base), str(head), "--paired", "--fail-on-regression", "5%", "--format", "json"]
    doc = json.loads(invoke(*args).output)
    gated = [r for r in doc["rows"] if r["gated"]]
    assert [r["metric"] for r in gated] == ["elapsed_s", "cpu_busy_s", "device_write_bytes_per_op", "fsyncs_per_op"]
    assert [r["p_holm"] for r in gated] == pytest.approx(stats.holm([r["p_value"] for r in gated]), nan_ok=True)
    assert {r["metric"]: r["threshold"] for r in gated}["fsyncs_per_op"] == gate.WORK_THRESHOLDS["fsyncs_per_op"]
    # time alone (the work metrics off): a family of two
    off = [f"--work-threshold={m}=off" for m in ("device_write_bytes_per_op", "fsyncs_per_op")]
    alone = [r for r in json.loads(invoke(*args, *off).output)["rows"] if r["gated"]]
    assert [r["metric"] for r in alone] == ["elapsed_s", "cpu_busy_s"]


def test_a_work_metric_not_measured_on_a_side_is_left_out_and_said_so(tmp_path: Path) -> None:
    base = write_run(tmp_path / "b", "base", samples(10.0, n=8, seed=1, cv=0.005))
    head = write_run(tmp_path / "h", "head", samples(10.0, n=8, seed=2, cv=0.005))
    _with_work(base, "fsyncs_per_op", samples(0.0002, n=8, seed=3, cv=0.02))
    _with_work(head, "fsyncs_per_op", [None] * 8)  # no counters on head: never 0
    _with_work(base, "device_flushes_per_op", [0.0] * 8)  # jfs sends no flush: no ratio
    _with_work(head, "device_flushes_per_op", [0.0] * 8)
    args = ["compare", str(base), str(head), "--paired", "--fail-on-regression", "5%"]
    doc = json.loads(invoke(*args, "--format", "json").output)
    assert "fsyncs_per_op" not in {r["metric"] for r in doc["rows"] if r["gated"]}
    left = {(w["metric"], w["why"]) for w in doc["work_left_out"]}
    assert ("fsyncs_per_op", "not measured on head") in left
    assert ("device_flushes_per_op", "0 (no ratio) on base, 0 (no ratio) on head") in left
    assert ("instructions_per_op", "not measured on base, not measured on head") in left
    assert doc["verdict"] == "PASS"  # what was measured on both sides is shown below its threshold
    md = invoke(*args, "--format", "md").output
    assert f"not gated: fsyncs_per_op (not measured on head) in {CELL}" in md


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("bytes=2%", "--work-threshold 'bytes=2%': expected METRIC=PCT"),
        ("fsyncs_per_op", "--work-threshold 'fsyncs_per_op': expected METRIC=PCT"),
        ("fsyncs_per_op=lots", "threshold 'lots'"),
    ],
)
def test_bad_work_thresholds_are_refused(tmp_path: Path, option: str, message: str) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1))
    head = write_run(tmp_path, "head", samples(10.0, seed=2))
    out = invoke("compare", str(base), str(head), "--fail-on-regression", "5%", "--work-threshold", option)
    assert out.exit_code == 2 and message in out.output and "Traceback" not in out.output
    alone = invoke("compare", str(base), str(head), "--work-threshold", "fsyncs_per_op=5%")
    assert alone.exit_code == 2 and "give --fail-on-regression" in alone.output


def test_work_measured_differently_is_not_gated_and_said_so(tmp_path: Path) -> None:
    """A base measured before a change of the agent's method (provenance.work_measurement: issue 51's
    windows synced at both ends) and a head after it: the work moved with the method, not the code,
    so no work metric is gated; time still is."""
    old, new = "cgroup: the workload's processes only", WORK_MEASUREMENT
    base = write_run(tmp_path, "base", samples(10.0, seed=1), work_measurement=old)
    head = _head_writing(tmp_path, 15.0, work_measurement=new)  # 50 % more bytes per update: a FAIL were they alike
    args = ["compare", str(base), str(head), "--fail-on-regression", "5%"]
    doc = json.loads(invoke(*args, "--format", "json").output)
    assert [r["metric"] for r in doc["rows"] if r["gated"]] == ["elapsed_s", "cpu_busy_s"]
    assert doc["verdict"] == "PASS"
    why = {w["metric"]: w["why"] for w in doc["work_left_out"]}
    assert set(why) == set(gate.WORK_THRESHOLDS)
    assert why["device_write_bytes_per_op"] == (
        f"measured differently, provenance.work_measurement: base {old!r} | head {new!r}"
    )
    assert "not gated: device_write_bytes_per_op (measured differently" in invoke(*args).output


def _durability_runs(tmp_path: Path, name: str, head_flushes: list[float | None]) -> tuple[Path, Path]:
    """8 pairs, the same time; base sends flushes in every run, head as given."""
    base = write_run(tmp_path / name / "b", "base", samples(10.0, n=8, seed=1, cv=0.005))
    head = write_run(tmp_path / name / "h", "head", samples(9.0, n=8, seed=2, cv=0.005))  # faster
    _with_work(base, "device_flushes_per_op", samples(0.00035, n=8, seed=3, cv=0.02))
    _with_work(head, "device_flushes_per_op", head_flushes)
    return base, head


def test_head_that_stopped_flushing_fails_the_gate_whatever_its_speed(tmp_path: Path) -> None:
    base, head = _durability_runs(tmp_path, "stopped", [0.0] * 8)
    args = ["compare", str(base), str(head), "--paired", "--fail-on-regression", "5%"]
    out = invoke(*args, "--format", "json")
    doc = json.loads(out.output)
    assert out.exit_code == 1 and doc["verdict"] == "FAIL"
    assert [(s["metric"], s["n_base"], s["n_head"]) for s in doc["stopped"]] == [("device_flushes_per_op", 8, 8)]
    assert "device_flushes_per_op" not in {w["metric"] for w in doc["work_left_out"]}  # named once, as the FAIL
    md = invoke(*args, "--format", "md").output
    assert f"GATE FAILED: 1 durability metric(s) stopped: {CELL} device_flushes_per_op: head did none in 8 runs" in md
    flagged = tmp_path / "flagged"
    invoke(*args, "--flagged-to", str(flagged))
    assert flagged.read_text() == f"{CELL}\n"  # the confirmation batch runs it again


@pytest.mark.parametrize(
    ("head_flushes", "verdict"),
    [([0.0] * 7 + [1e-5], "PASS"), ([None] * 8, "PASS")],  # some flushes on head; not measured on head
)
def test_only_every_head_run_at_zero_against_every_base_run_above_is_stopped(
    tmp_path: Path, head_flushes: list[float | None], verdict: str
) -> None:
    base, head = _durability_runs(tmp_path, "not", head_flushes)
    doc = json.loads(
        invoke("compare", str(base), str(head), "--paired", "--fail-on-regression", "5%", "--format", "json").output
    )
    assert doc["stopped"] == [] and doc["verdict"] == verdict


def test_stopped_durability_is_confirmed_on_a_second_batch(tmp_path: Path) -> None:
    base, head = _durability_runs(tmp_path, "first", [0.0] * 8)
    again_base, again_head = _durability_runs(tmp_path, "again", [0.0] * 8)
    cleared_base, cleared_head = _durability_runs(tmp_path, "cleared", samples(0.00035, n=8, seed=5, cv=0.02))
    args = ["compare", str(base), str(head), "--paired", "--fail-on-regression", "5%"]
    confirmed = invoke(*args, "--confirm", str(again_base), str(again_head), "--format", "md")
    assert confirmed.exit_code == 1 and "CONFIRMED durability lost:" in confirmed.output
    cleared = invoke(*args, "--confirm", str(cleared_base), str(cleared_head), "--format", "json")
    doc = json.loads(cleared.output)
    assert cleared.exit_code == 3 and doc["verdict"] == "NOT DECIDED"
    assert doc["not_confirmed"] == [[CELL, "device_flushes_per_op"]]
    missing = invoke(*args, "--confirm", str(tmp_path / "none1"), str(tmp_path / "none2"), "--format", "md")
    assert missing.exit_code == 1 and "UNCONFIRMABLE durability lost:" in missing.output
