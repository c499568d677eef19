"""sysbench fileio: the parser on captured sysbench 1.0.20 output, and real short runs under /var/tmp."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import TEST_DATA, Golden, golden_cases
from fsmatrix.agent import oscache, proc
from fsmatrix.agent.contract import Workspace
from fsmatrix.agent.parsing import standalone_cell
from fsmatrix.agent.workloads import sysbench

DATA = TEST_DATA / "sysbench"
READ_MODES = ("seqrd", "rndrd")
WRITE_MODES = ("seqwr", "seqrewr", "rndwr")
# Small enough that prepare takes a fraction of a second, big enough to exceed one block per file.
TINY = {"total_size": "16M", "num_files": 4, "duration": 1}


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
    base = Path(tempfile.mkdtemp(prefix="fsmatrix-test-sysbench-", dir="/var/tmp"))
    workspace = Workspace(data=base / "data", journal=base / "data", scratch=base / "scratch")
    workspace.data.mkdir()
    yield workspace
    shutil.rmtree(base)


# --- parser -------------------------------------------------------------------------------------


def test_parse_rndrw_exact_values() -> None:
    numbers = sysbench.parse_run_output((DATA / "rndrw-direct.txt").read_text())
    assert numbers == {
        "reads_per_s": 9436.10,
        "writes_per_s": 6290.40,
        "fsyncs_per_s": 631.14,
        "read_mib_s": 147.44,
        "write_mib_s": 98.29,
        "total_time_s": 1.0005,
        "events": 16376,
        "latency_min_ms": 0.03,
        "latency_avg_ms": 0.06,
        "latency_max_ms": 3.55,
        "latency_p95_ms": 0.08,
        "latency_sum_ms": 995.82,
        "iops": pytest.approx(9436.10 + 6290.40),
    }
    assert isinstance(numbers["events"], int)
    # issue 51: the operations are the events sysbench counted, not iops × total time (15,734.3 here)
    assert sysbench.WORKLOAD.operations(numbers) == 16376


@pytest.mark.parametrize("mode", sysbench.VALID_MODES)
def test_parse_every_mode(mode: str) -> None:
    n = sysbench.parse_run_output((DATA / f"{mode}-direct.txt").read_text())
    assert n["events"] > 0
    assert n["total_time_s"] == pytest.approx(1.0, abs=0.05)  # captured with --time=1
    assert n["iops"] == pytest.approx(n["reads_per_s"] + n["writes_per_s"])
    # events count reads, writes and fsyncs
    per_s = n["reads_per_s"] + n["writes_per_s"] + n["fsyncs_per_s"]
    assert n["events"] == pytest.approx(per_s * n["total_time_s"], rel=0.01)
    # 16 KiB blocks: MiB/s = requests/s / 64
    assert n["read_mib_s"] == pytest.approx(n["reads_per_s"] / 64, rel=0.01, abs=0.01)
    assert n["write_mib_s"] == pytest.approx(n["writes_per_s"] / 64, rel=0.01, abs=0.01)
    assert n["latency_min_ms"] <= n["latency_avg_ms"] <= n["latency_max_ms"]
    assert n["latency_p95_ms"] <= n["latency_max_ms"]
    if mode in READ_MODES:
        assert n["reads_per_s"] > 0
        assert n["writes_per_s"] == n["write_mib_s"] == n["fsyncs_per_s"] == 0
    elif mode in WRITE_MODES:
        assert n["writes_per_s"] > 0
        assert n["fsyncs_per_s"] > 0  # the default fsync every 100 requests
        assert n["reads_per_s"] == n["read_mib_s"] == 0
    else:
        assert n["reads_per_s"] / n["writes_per_s"] == pytest.approx(1.5, rel=0.05)  # --file-rw-ratio


def test_parse_buffered_two_threads() -> None:
    n = sysbench.parse_run_output((DATA / "rndrw-buffered-2threads.txt").read_text())
    assert n["reads_per_s"] > 0 and n["writes_per_s"] > 0
    assert n["latency_min_ms"] == 0.0  # page-cache hits round to 0.00 ms
    assert n["latency_sum_ms"] > 1000  # two threads busy for ~1 s each


def test_parse_failed_run_names_the_fatal_error() -> None:
    with pytest.raises(ValueError, match=r"FATAL: Cannot open file 'test_file.0'"):
        sysbench.parse_run_output((DATA / "seqrd-missing-files.txt").read_text())


def test_parse_truncated_output_names_missing_fields() -> None:
    text = (DATA / "seqwr-direct.txt").read_text().split("Latency (ms):")[0]
    with pytest.raises(ValueError, match="latency_avg_ms"):
        sysbench.parse_run_output(text)


def test_parse_rejects_a_non_number() -> None:
    text = (DATA / "seqwr-direct.txt").read_text().replace("0.05", "-nan", 1)
    with pytest.raises(ValueError, match="not a number"):
        sysbench.parse_run_output(text)


@pytest.mark.parametrize("case", golden_cases("sysbench"))
def test_parse_run_output_golden(case: Golden) -> None:
    """Every captured sysbench output in tests/data/sysbench/ parses to its expected numbers."""
    case.check(sysbench.parse_run_output)


# --- parameters and key metrics -----------------------------------------------------------------


def test_defaults_are_filled_and_checked() -> None:
    params = sysbench.resolve_params({"mode": "rndrd"})
    assert params == {"mode": "rndrd", **sysbench.DEFAULTS}
    assert sysbench.DEFAULTS["io"] == "direct" and sysbench.DEFAULTS["fsync_freq"] == 100
    for bad in (
        {},
        {"mode": "random"},
        {"mode": "rndrd", "io": "mmap"},
        {"mode": "rndrd", "total_size": "1 GB"},
        {"mode": "rndrd", "threads": 0},
        {"mode": "rndrd", "duration": 1.5},
        {"mode": "rndrd", "rw_ratio": -1},
        {"mode": "rndrd", "blocksize": 4096},
    ):
        with pytest.raises(ValueError):
            sysbench.resolve_params(bad)


def test_key_metrics_leave_out_directions_a_mode_never_does() -> None:
    assert sysbench.key_metrics({"mode": "rndrd"}) == {
        "iops": "higher",
        "read_mib_s": "higher",
        "latency_p95_ms": "lower",
    }
    assert "read_mib_s" not in sysbench.key_metrics({"mode": "seqwr"})
    assert "write_mib_s" in sysbench.key_metrics({"mode": "seqrewr"})
    assert set(sysbench.key_metrics({"mode": "rndrw"})) == set(sysbench.KEY_METRICS)
    assert "read_mib_s" not in sysbench.key_metrics({"mode": "rndrw", "rw_ratio": 0})
    union: dict[str, str] = {}
    for mode in sysbench.VALID_MODES:
        union |= sysbench.key_metrics({"mode": mode})
    assert union == sysbench.KEY_METRICS
    assert set(sysbench.KEY_METRICS) <= set(sysbench.METRICS)


# --- real runs ----------------------------------------------------------------------------------


@pytest.mark.root
def test_drop_caches_empties_the_page_cache(ws: Workspace) -> None:
    path = ws.data / "cached"
    path.write_bytes(os.urandom(4 << 20))
    path.read_bytes()

    def cached_pages() -> int:
        return int(proc.output(["fincore", "--bytes", "--noheadings", "--output=PAGES", str(path)]).split()[0])

    assert cached_pages() > 0
    oscache.drop_caches()
    assert cached_pages() == 0


@pytest.mark.root
@pytest.mark.parametrize("mode", sysbench.VALID_MODES)
def test_every_mode_runs(mode: str, ws: Workspace) -> None:
    outcome = sysbench.run_cell(standalone_cell("sysbench", {"mode": mode, **TINY}), ws, timeout=60)
    assert outcome.verification == {"status": "passed"}
    assert outcome.versions == {"sysbench": "1.0.20"}
    m = outcome.metrics
    assert set(m) == set(sysbench.METRICS)
    assert m["events"] > 0 and m["iops"] > 0 and m["latency_max_ms"] > 0
    for metric in sysbench.key_metrics({"mode": mode}):
        if metric != "latency_p95_ms":  # may round to 0.00 ms on a fast disk
            assert m[metric] > 0, metric
    assert outcome.details["raw"]["latency_sum_ms"] > 0
    assert "--file-extra-flags=direct" in outcome.details["command"]
    assert (ws.scratch / "sysbench-run.txt").read_text().startswith("sysbench 1.0.20")
    assert list(ws.data.iterdir()) == []  # cleanup removed the test files


@pytest.mark.root
def test_buffered_io_with_threads(ws: Workspace) -> None:
    params = {"mode": "rndrw", "io": "buffered", "threads": 2, **TINY}
    outcome = sysbench.run_cell(standalone_cell("sysbench", params), ws, timeout=60)
    assert outcome.verification["status"] == "passed"
    assert not any("extra-flags" in arg for arg in outcome.details["command"])
    assert "--threads=2" in outcome.details["command"]
    assert outcome.metrics["read_mib_s"] > 0 and outcome.metrics["write_mib_s"] > 0


@pytest.mark.root
def test_failing_run_is_reported_and_cleaned_up(ws: Workspace) -> None:
    # O_DIRECT needs aligned blocks: sysbench stops with "FATAL: Failed to read file" and status 1.
    params = {"mode": "rndrd", "block_size": 1000, **TINY}
    outcome = sysbench.run_cell(standalone_cell("sysbench", params), ws, timeout=60)
    assert outcome.verification["status"] == "failed"
    assert "exited with status 1" in outcome.verification["message"]
    assert "FATAL" in outcome.verification["message"]
    assert outcome.metrics == {}
    assert list(ws.data.iterdir()) == []


@pytest.mark.root
def test_timeout_kills_sysbench_and_cleans_up(ws: Workspace) -> None:
    params = {"mode": "rndrd", "total_size": "16M", "num_files": 4, "duration": 60}
    seen: list[str] = []
    started = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(sysbench.run_cell, standalone_cell("sysbench", params), ws, 3.0)
        while not future.done() and not seen:
            seen = [p for p in processes_in(ws.data) if "run" in p]
            time.sleep(0.1)
        with pytest.raises(TimeoutError, match="exceeded the timeout"):
            future.result()
    assert seen, "sysbench was never seen running"
    assert time.monotonic() - started < 15
    assert processes_in(ws.data) == []
    assert list(ws.data.iterdir()) == []


@pytest.mark.root
def test_standalone_fills_defaults(ws: Workspace) -> None:
    outcome = sysbench.run_standalone(standalone_cell("sysbench", {"mode": "seqrd", **TINY}), ws.data, timeout=60)
    assert outcome.verification["status"] == "passed"
    json.dumps(dataclasses.asdict(outcome), allow_nan=False)  # results are written as JSON
    params = outcome.details["params"]
    assert params["block_size"] == 16384 and params["io"] == "direct" and params["rw_ratio"] == 1.5
    assert outcome.metrics["read_mib_s"] > 0
    assert list(ws.data.iterdir()) == []
    with pytest.raises(NotADirectoryError):
        sysbench.run_standalone(standalone_cell("sysbench", {"mode": "seqrd"}), ws.data / "missing", timeout=60)
