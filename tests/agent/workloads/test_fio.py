"""fio: the JSON parser on captured fio 3.33 reports, and real short runs under /var/tmp."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from conftest import TEST_DATA, Golden, golden_cases
from fsmatrix.agent import oscache
from fsmatrix.agent.contract import Workspace
from fsmatrix.agent.parsing import standalone_cell
from fsmatrix.agent.workloads import fio

DATA = TEST_DATA / "fio"
MIB = 2**20
READS = ("read", "reread", "randread")
WRITES = ("write", "rewrite", "randwrite")


def processes_in(directory: Path) -> list[str]:
    """Processes whose working directory or command line lies under ``directory``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # exited meanwhile
        if cwd.startswith(str(directory)) or str(directory) in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


@pytest.fixture
def ws() -> Iterator[Workspace]:
    base = Path(tempfile.mkdtemp(prefix="fsmatrix-test-fio-", dir="/var/tmp"))
    workspace = Workspace(data=base / "data", journal=base / "data", scratch=base / "scratch")
    workspace.data.mkdir()
    yield workspace
    shutil.rmtree(base)


def capture(name: str) -> str:
    return (DATA / f"{name}.json").read_text()


# --- parser -------------------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", fio.VALID_PATTERNS)
def test_parse_every_pattern(pattern: str) -> None:
    # Captured with file_size=16m, record_size=8k, one job, runtime 0: exactly 16 MiB moved.
    n = fio.parse_json(capture(f"{pattern}-1job"))
    assert n["io_bytes"] == 16 * MIB
    assert n["io_bytes"] == n["read_io_bytes"] + n["write_io_bytes"]
    assert n["iops"] == pytest.approx(n["read_iops"] + n["write_iops"])
    # rates agree with bytes / runtime (fio's runtime is in whole milliseconds)
    assert n["iops"] == pytest.approx(n["io_bytes"] / 8192 / n["runtime_s"], rel=0.02)
    assert n["read_mib_s"] + n["write_mib_s"] == pytest.approx(n["io_bytes"] / MIB / n["runtime_s"], rel=0.02)
    assert n["lat_mean_us"] > 0
    assert 0 < n["lat_p95_us"] <= n["lat_p99_us"]
    if pattern in READS:
        assert n["write_io_bytes"] == n["write_mib_s"] == n["write_lat_mean_us"] == 0
        assert n["lat_mean_us"] == n["read_lat_mean_us"]
    elif pattern in WRITES:
        assert n["read_io_bytes"] == n["read_mib_s"] == n["read_lat_mean_us"] == 0
        assert n["lat_p95_us"] == n["write_lat_p95_us"]
    else:
        assert n["read_io_bytes"] > 0 and n["write_io_bytes"] > 0
        assert n["read_io_bytes"] / n["io_bytes"] == pytest.approx(0.5, abs=0.1)  # rwmixread=50


def test_parse_values_come_from_the_right_fields() -> None:
    text = capture("randrw-1job")
    job = json.loads(text)["jobs"][0]
    n = fio.parse_json(text)
    assert n["read_mib_s"] == job["read"]["bw_bytes"] / MIB
    assert n["write_iops"] == job["write"]["iops"]
    assert n["write_lat_mean_us"] == pytest.approx(job["write"]["lat_ns"]["mean"] / 1000)
    assert n["read_lat_p99_us"] == job["read"]["lat_ns"]["percentile"]["99.000000"] / 1000
    # the combined figures are those of all I/O ("mixed" section)
    assert n["lat_mean_us"] == pytest.approx(job["mixed"]["lat_ns"]["mean"] / 1000, rel=1e-6)
    assert n["lat_p95_us"] == job["mixed"]["lat_ns"]["percentile"]["95.000000"] / 1000
    low, high = sorted((n["read_lat_p95_us"], n["write_lat_p95_us"]))
    assert low <= n["lat_p95_us"] <= high
    assert n["runtime_s"] == max(job["read"]["runtime"], job["write"]["runtime"]) / 1000
    # issue 51: the operations are the I/Os fio counted, not iops × runtime rebuilt from rounded rates
    assert n["ios"] == job["read"]["total_ios"] + job["write"]["total_ios"]
    assert fio.WORKLOAD.operations(n) == n["ios"]


def test_parse_aggregated_jobs() -> None:
    n = fio.parse_json(capture("write-4jobs"))
    assert n["io_bytes"] == 4 * 16 * MIB  # four jobs, each its own 16 MiB file
    four = fio.parse_json(capture("randrw-4jobs-runtime1"))
    assert four["runtime_s"] == pytest.approx(1.0, abs=0.01)  # time_based, runtime=1
    assert four["read_iops"] / four["iops"] == pytest.approx(0.7, abs=0.05)  # rwmixread=70
    assert four["io_bytes"] / MIB / four["runtime_s"] == pytest.approx(
        four["read_mib_s"] + four["write_mib_s"], rel=0.02
    )


def test_parse_sums_separately_reported_jobs() -> None:
    # Without group_reporting fio lists every job; throughput adds up, the mean latency does not.
    doc = json.loads(capture("randrw-1job"))
    one = fio.parse_json(doc)
    doc["jobs"].append(copy.deepcopy(doc["jobs"][0]))
    two = fio.parse_json(doc)
    assert two["io_bytes"] == 2 * one["io_bytes"]
    assert two["iops"] == pytest.approx(2 * one["iops"])
    assert two["write_mib_s"] == pytest.approx(2 * one["write_mib_s"])
    assert two["lat_mean_us"] == pytest.approx(one["lat_mean_us"])
    assert two["lat_p99_us"] == one["lat_p99_us"]
    assert two["runtime_s"] == one["runtime_s"]


def test_parse_buffered_reread_hits_the_page_cache() -> None:
    cached = fio.parse_json(capture("reread-buffered"))
    direct = fio.parse_json(capture("reread-1job"))
    assert cached["io_bytes"] == 16 * MIB
    assert cached["read_mib_s"] > 5 * direct["read_mib_s"]


def test_parse_report_behind_error_lines() -> None:
    text = capture("write-direct-misaligned")
    assert text.startswith("fio: io_u error")
    n = fio.parse_json(text)
    assert n["io_bytes"] == 0 and n["iops"] == 0 and n["lat_p95_us"] == 0


def test_parse_takes_text_or_decoded_document() -> None:
    text = capture("read-1job")
    assert fio.parse_json(text) == fio.parse_json(json.loads(text))


def test_parse_rejects_what_is_not_a_fio_report() -> None:
    doc: dict[str, Any] = json.loads(capture("read-1job"))
    del doc["jobs"][0]["write"]
    cases: list[str | dict[str, Any]] = [
        "fio: failed parsing rw=bogus\n",
        "{\n broken",
        {"jobs": []},
        {"fio version": "fio-3.33"},
        doc,
    ]
    for bad in cases:
        with pytest.raises(ValueError):
            fio.parse_json(bad)


@pytest.mark.parametrize("case", golden_cases("fio"))
def test_parse_json_golden(case: Golden) -> None:
    """Every captured fio JSON report in tests/data/fio/ parses to its expected numbers."""
    case.check(fio.parse_json)


# --- parameters and key metrics -----------------------------------------------------------------


def test_defaults_are_filled_and_checked() -> None:
    assert fio.resolve_params({"pattern": "read"}) == {"pattern": "read", **fio.DEFAULTS}
    assert fio.DEFAULTS["record_size"] == "8K" and fio.DEFAULTS["direct"] is True
    for bad in (
        {},
        {"pattern": "stride"},
        {"pattern": "read", "jobs": 0},
        {"pattern": "read", "rwmixread": 101},
        {"pattern": "read", "direct": 1},
        {"pattern": "read", "file_size": "1 GB"},
        {"pattern": "read", "ioengine": "psync --exec_prerun=x"},
        {"pattern": "read", "size": "1G"},
    ):
        with pytest.raises(ValueError):
            fio.resolve_params(bad)


def test_key_metrics_leave_out_directions_a_pattern_never_does() -> None:
    assert fio.key_metrics({"pattern": "randread"}) == {
        "iops": "higher",
        "read_mib_s": "higher",
        "lat_p95_us": "lower",
    }
    assert "read_mib_s" not in fio.key_metrics({"pattern": "rewrite"})
    assert set(fio.key_metrics({"pattern": "randrw"})) == set(fio.KEY_METRICS)
    assert "write_mib_s" not in fio.key_metrics({"pattern": "randrw", "rwmixread": 100})
    assert "read_mib_s" not in fio.key_metrics({"pattern": "randrw", "rwmixread": 0})
    union: dict[str, str] = {}
    for pattern in fio.VALID_PATTERNS:
        union |= fio.key_metrics({"pattern": pattern})
    assert union == fio.KEY_METRICS
    assert set(fio.KEY_METRICS) <= set(fio.METRICS)


# --- real runs ----------------------------------------------------------------------------------

PHASES = {
    "write": ["measure"],
    "reread": ["layout", "first-read", "measure"],
}


@pytest.mark.root
@pytest.mark.parametrize("pattern", fio.VALID_PATTERNS)
def test_every_pattern_runs(pattern: str, ws: Workspace) -> None:
    outcome = fio.run_cell(standalone_cell("fio", {"pattern": pattern, "file_size": "4m"}), ws, timeout=60)
    assert outcome.verification == {"status": "passed"}
    assert outcome.versions == {"fio": "fio-3.33"}
    m = outcome.metrics
    assert set(m) == set(fio.METRICS)
    assert m["io_bytes"] == 4 * MIB
    for metric in fio.key_metrics({"pattern": pattern}):
        assert m[metric] > 0, metric
    phases = outcome.details["phases"]
    assert [p["name"] for p in phases] == PHASES.get(pattern, ["layout", "measure"])
    assert [p["measured"] for p in phases] == [False] * (len(phases) - 1) + [True]
    assert all(p["numbers"]["io_bytes"] == 4 * MIB for p in phases)
    reports = sorted(path.name for path in ws.scratch.iterdir())
    assert reports == [f"fio-{i}-{p['name']}.json" for i, p in enumerate(phases)]
    assert list(ws.data.iterdir()) == []  # the job files are removed


@pytest.mark.root
def test_several_jobs_for_a_fixed_time(ws: Workspace) -> None:
    params = {"pattern": "randrw", "file_size": "4m", "jobs": 2, "runtime": 1, "rwmixread": 70}
    outcome = fio.run_cell(standalone_cell("fio", params), ws, timeout=60)
    assert outcome.verification["status"] == "passed"
    m = outcome.metrics
    assert m["runtime_s"] == pytest.approx(1.0, abs=0.1)
    assert m["io_bytes"] > 2 * 4 * MIB  # time_based cycles over both files
    assert m["read_iops"] / m["iops"] == pytest.approx(0.7, abs=0.05)
    command = outcome.details["phases"][-1]["command"]
    assert "--numjobs=2" in command and "--time_based" in command and "--rwmixread=70" in command
    assert "--time_based" not in outcome.details["phases"][0]["command"]  # layout writes it all
    # The layout pass writes in 1 MiB requests whatever the record size; the measured pass uses the record.
    assert "--bs=1048576" in outcome.details["phases"][0]["command"] and "--bs=8K" in command


@pytest.mark.root
@pytest.mark.parametrize(("pattern", "direct", "drops"), [("read", False, 1), ("reread", False, 1), ("read", True, 0)])
def test_caches_dropped_before_measuring_buffered_io(
    pattern: str, direct: bool, drops: int, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = oscache.drop_caches

    def counting() -> None:
        calls.append(1)
        real()

    monkeypatch.setattr(oscache, "drop_caches", counting)
    params = {"pattern": pattern, "file_size": "4m", "direct": direct}
    outcome = fio.run_cell(standalone_cell("fio", params), ws, timeout=60)
    assert outcome.verification["status"] == "passed"
    assert len(calls) == drops
    if pattern == "reread":
        # the second pass reads from the page cache: fio must not invalidate it
        assert "--invalidate=0" in outcome.details["phases"][-1]["command"]
        first, second = (p["numbers"]["read_mib_s"] for p in outcome.details["phases"][1:])
        assert second > first


@pytest.mark.root
def test_failing_run_is_reported_and_cleaned_up(ws: Workspace) -> None:
    params = {"pattern": "write", "file_size": "1m", "record_size": "1000"}  # O_DIRECT needs alignment
    outcome = fio.run_cell(standalone_cell("fio", params), ws, timeout=60)
    assert outcome.verification["status"] == "failed"
    assert "exited with status 1" in outcome.verification["message"]
    assert "Invalid argument" in outcome.verification["message"]
    assert outcome.metrics == {}
    assert list(ws.data.iterdir()) == []


@pytest.mark.root
def test_timeout_kills_every_job_and_cleans_up(ws: Workspace) -> None:
    params = {"pattern": "randread", "file_size": "4m", "jobs": 2, "runtime": 60}
    seen: list[str] = []
    started = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(fio.run_cell, standalone_cell("fio", params), ws, 4.0)
        while not future.done() and not seen:
            seen = [p for p in processes_in(ws.data) if "--rw=randread" in p]
            time.sleep(0.1)
        with pytest.raises(TimeoutError, match="exceeded the timeout"):
            future.result()
    assert seen, "fio was never seen running"
    assert time.monotonic() - started < 15
    assert processes_in(ws.data) == []
    assert list(ws.data.iterdir()) == []


@pytest.mark.root
def test_standalone_fills_defaults(ws: Workspace) -> None:
    outcome = fio.run_standalone(standalone_cell("fio", {"pattern": "write", "file_size": "4m"}), ws.data, timeout=60)
    assert outcome.verification["status"] == "passed"
    json.dumps(dataclasses.asdict(outcome), allow_nan=False)  # results are written as JSON
    params = outcome.details["params"]
    assert params["record_size"] == "8K" and params["ioengine"] == "psync" and params["jobs"] == 1
    assert outcome.metrics["write_iops"] == pytest.approx(outcome.metrics["write_mib_s"] * 128, rel=0.01)
    assert list(ws.data.iterdir()) == []
    with pytest.raises(NotADirectoryError):
        fio.run_standalone(standalone_cell("fio", {"pattern": "write"}), ws.data / "missing", timeout=60)
