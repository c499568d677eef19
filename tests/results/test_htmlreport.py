"""The HTML report of real host-backend results, rendered in headless Chromium; CSV and Otava exports."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console

from conftest import needs_root, typed
from fsmatrix import matrix, racing, runs
from fsmatrix.agent import proc
from fsmatrix.agent.work import WORK_METRICS
from fsmatrix.backends.host import HostBackend
from fsmatrix.cli import main
from fsmatrix.results import store
from fsmatrix.results.render import exports
from fsmatrix.results.render import page as html_page
from fsmatrix.results.verdict import report

pytestmark = pytest.mark.system  # real host-backend runs, then headless Chromium

MATRIX = {
    "name": "htmltest",
    "axes": {"filesystem": ["ext4", "xfs"], "gtm.sync_io": [False, True]},
    "defaults": {
        "workload": {"threen1": {"start": 1, "end": 100000, "workers": 4, "block": 5000}},
        "storage.disk_size": "1G",
    },
}
REPEATS = 2
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real results: 3n+1 on ext4 and xfs, sync_io off and on, 2 repeats each (about 20 s)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: losetup, mkfs and mount")
    root = tmp_path_factory.mktemp("results")
    m = matrix.expand_document(MATRIX, "htmltest")
    options = runs.RunOptions(root, "htmltest", racing.RunPlan.fixed(REPEATS), force=True)
    summary = runs.run_matrix(m, m.cells, HostBackend(workdir=root / "work"), options, Console(stderr=True, quiet=True))
    assert summary.ok, summary.counts
    return summary.run_dir


def render(page: Path, tmp: Path) -> tuple[str, list[str]]:
    """Load ``page`` in headless Chromium: the DOM after load, and every URL the page itself requested
    (from Chromium's network log; the browser's own background requests are not the page's)."""
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is needed for this test (apt-get install chromium)"
    profile, netlog = tmp / f"profile-{page.stem}", tmp / f"netlog-{page.stem}.json"
    dom = proc.output(
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--log-net-log={netlog}",
            "--dump-dom",
            page.as_uri(),
        ],
        timeout=120,
    )
    log = json.loads(netlog.read_text(encoding="utf-8"))
    urls = set()
    for event in log["events"]:
        params = event.get("params") or {}
        url = str(params.get("url", ""))
        # requests made on behalf of a file:// page carry that page's network isolation key
        if url and not url.startswith(("file:", "data:")) and "file://" in str(params.get("network_isolation_key")):
            urls.add(url)
    return dom, sorted(urls)


def without_csp(text: str) -> str:
    return re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)


EXTERNAL_REFERENCE = re.compile(
    r"""(?:\s(?:src|href|xlink:href)\s*=\s*["']?\s*(?:https?:|//|ftp:))|url\(\s*["']?(?:https?:|//)"""
)


@needs_root
def test_html_report_renders_with_charts_and_loads_nothing(run_dir: Path, tmp_path: Path) -> None:
    docs = store.load_results(run_dir)
    page = html_page.write_html(report.of_results(docs), "htmltest", tmp_path / "out")
    source = page.read_text(encoding="utf-8")
    dom, requested = render(page, tmp_path)
    assert requested == []
    assert 'http-equiv="Content-Security-Policy"' in dom and "default-src 'none'" in dom
    figures = re.findall(r'<figure class="chart">\s*<svg.*?</svg>\s*<figcaption>(.*?)</figcaption>', dom, re.S)
    # per sync_io group: elapsed, read rate, update rate, worker CPU, then the device bytes written and read
    # per operation (the work tables); then one series chart per run
    bars = [f for f in figures if "whiskers" in f]
    series = [f for f in figures if "repeat" in f]
    titles = {m.title for m in WORK_METRICS}
    work = [f for f in bars if f.split(":")[0] in titles]
    assert len(bars) - len(work) == 2 * 4, figures
    assert sum(f.startswith("Device bytes written per operation:") for f in work) == 2  # the host measures it
    sampled = [d for d in docs if d.samples.series]  # a run shorter than 1 s may have no sample
    assert len(series) == len(sampled) >= REPEATS, figures
    # drawn, not empty: the charts' paths, the effects chart's interval lines (render/effects.py)
    empty = [svg[:300] for svg in re.findall(r"<svg.*?</svg>", dom, re.S) if "<path" not in svg and "<line" not in svg]
    assert not empty, empty
    assert "Relative speed" in dom and "sync_io" in dom  # seed 000's sync_io table
    assert "× the best median" in dom
    assert not EXTERNAL_REFERENCE.search(source)
    # and without the CSP safety net the page still requests nothing: nothing in it points outside
    bare = tmp_path / "bare.html"
    bare.write_text(without_csp(source), encoding="utf-8")
    _, requested = render(bare, tmp_path)
    assert requested == []


@needs_root
def test_the_network_check_catches_an_outside_reference(tmp_path: Path) -> None:
    page = tmp_path / "leaky.html"
    leak = '<img src="http://127.0.0.1:9/pixel.png"><link rel="stylesheet" href="https://example.invalid/x.css">'
    page.write_text(f"<!DOCTYPE html><html><head></head><body>{leak}<p>x</p></body></html>", encoding="utf-8")
    _, requested = render(page, tmp_path)
    assert "http://127.0.0.1:9/pixel.png" in requested
    assert "https://example.invalid/x.css" in requested
    assert EXTERNAL_REFERENCE.search(leak)


@needs_root
def test_report_cli_formats(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "html"
    md = CliRunner().invoke(main, ["report", str(run_dir), "--html", str(out)])
    assert md.exit_code == 0, md.output
    assert "# fsmatrix report" in md.output and "Relative speed" in md.output
    assert (out / "report.html").stat().st_size > 10_000

    table = CliRunner().invoke(main, ["report", str(run_dir), "--format", "csv"])
    rows = list(csv.DictReader(io.StringIO(table.output)))
    assert len(rows) == 4 * REPEATS
    assert {r["status"] for r in rows} == {"passed"}
    assert all(float(r["elapsed_s"]) > 0 for r in rows)
    assert {r["param.gtm.sync_io"] for r in rows} == {"False", "True"}

    otava = CliRunner().invoke(main, ["report", str(run_dir), "--format", "otava"])
    points = list(csv.DictReader(io.StringIO(otava.output)))
    assert len(points) == 1  # one run id: one point in history
    (point,) = points
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}", point["time"])
    assert len(point["commit"]) == 40 or point["commit"] == ""
    metric_columns = [c for c in point if c.endswith(".elapsed_s")]
    assert len(metric_columns) == 4 and all(float(point[c]) > 0 for c in metric_columns)

    config = yaml.safe_load(CliRunner().invoke(main, ["report", str(run_dir), "--format", "otava-config"]).output)
    test = config["tests"]["fsmatrix"]
    assert test["type"] == "csv" and test["time_column"] == "time"
    assert set(test["metrics"]) == {c for c in point if "." in c}  # every CSV metric column, and only those
    assert {test["metrics"][c]["direction"] for c in metric_columns} == {-1}  # a time: lower is better


def test_otava_csv_orders_runs_by_time_with_medians() -> None:
    def doc(run_id: str, repeat: int, started: str, elapsed: float) -> dict[str, Any]:
        return {
            "run_id": run_id,
            "cell_id": "c",
            "repeat": repeat,
            "status": "passed",
            "started_at": started,
            "metrics": {"elapsed_s": elapsed},
            "key_metrics": {"elapsed_s": "lower"},
            "provenance": {"git": {"sha": run_id * 4}},
        }

    docs = [
        doc("late", 1, "2026-02-01T00:00:00+00:00", 3.0),
        doc("early", 1, "2026-01-01T00:00:00+00:00", 1.0),
        doc("early", 2, "2026-01-01T00:01:00+00:00", 2.0),
        doc("early", 3, "2026-01-01T00:02:00+00:00", 9.0),
    ]
    text = exports.otava_csv(typed(docs))
    assert text.splitlines() == [
        "time,commit,run_id,c.elapsed_s",
        "2026-01-01 00:00:00 +0000,earlyearlyearlyearly,early,2.0",
        "2026-02-01 00:00:00 +0000,latelatelatelate,late,3.0",
    ]


def test_report_bad_inputs(tmp_path: Path) -> None:
    missing = CliRunner().invoke(main, ["report", str(tmp_path / "missing")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    empty = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert empty.exit_code == 2 and "no result documents" in empty.output
