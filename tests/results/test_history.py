"""``fsmatrix history`` (results/store/history.py, store/otava.py, verdict/history.py, render/history.py,
render/trends.py): real Otava in its own virtualenv, real SQLite stores and a throwaway PostgreSQL, real
`fsmatrix` processes; the documents are a real host-backend result (tests/data/goldens) made into
histories, seeded, each differing from the last in exactly one recorded field."""

from __future__ import annotations

import copy
import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from conftest import FSMATRIX, TEST_DATA, invoke
from fsmatrix.agent.work import WORK_METRICS
from fsmatrix.backends import image
from fsmatrix.bench.throwaway_pg import available, cluster
from fsmatrix.results.render import trends
from fsmatrix.results.store import Result, database, otava
from fsmatrix.results.store import history as stored_history
from fsmatrix.results.store import url as store_urls
from fsmatrix.results.verdict import history as decide
from test_htmlreport import CHROMIUM_FLAGS, EXTERNAL_REFERENCE, render, without_csp
from test_store import cli_env

TEMPLATE = json.loads(next(iter(sorted((TEST_DATA / "goldens/threen1/threen1").glob("ext4-*/r1.json")))).read_text())
FIRST = datetime(2026, 11, 1, 1, 0, tzinfo=UTC)
# A drift of 20 % over 60 runs (seeded): Otava 0.8.0 cuts it into four levels, as any step detector must
# (it has no trend model); pinned so that another Otava or threshold that changes this is noticed.
DRIFT_CUTS = [17, 40, 48]
WORK_NAMES = {m.name for m in WORK_METRICS}


@pytest.fixture(scope="module")
def otava_python() -> Path:
    """Otava's virtualenv in fsmatrix's cache (made once, as `make deps` does)."""
    return otava.ensure(image.cache_root() / otava.VENV_NAME)


NOT_MEASURED = "not measured in this test's history"


def document(
    i: int, value: float, *, run_id: str = "nightly", change: dict[str, Any] | None = None, work: bool = False
) -> dict[str, Any]:
    """The template as the ``i``-th night's run: elapsed_s = ``value``; ``change``: dotted paths
    (``provenance.kernel``, ``params.gtm.global_buffers``) set to new values. Its work per operation
    (the template's device bytes per operation) kept with ``work``, else not measured (None, and why:
    no series of them)."""
    doc = copy.deepcopy(TEMPLATE)
    if not work:
        for name in [n for n in doc["metrics"] if n in WORK_NAMES]:
            doc["metrics"][name] = None
            doc.setdefault("metrics_unavailable", {})[name] = NOT_MEASURED
    started = FIRST + timedelta(days=i)
    doc.update(
        run_id=run_id,
        repeat=1,
        started_at=started.isoformat(),
        finished_at=(started + timedelta(seconds=3)).isoformat(),
    )
    doc["metrics"]["elapsed_s"] = value
    doc["key_metrics"] = {"elapsed_s": "lower"}
    for path, new in (change or {}).items():
        *parents, leaf = path.split(".")
        section = doc
        for part in parents:
            section = section.setdefault(part, {})
        section[leaf] = new
    return doc


def step_values(n_before: int, n_after: int, factor: float, seed: int, spread: float = 0.01) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(1.0, spread) for _ in range(n_before)] + [rng.gauss(factor, spread) for _ in range(n_after)]


def histories(docs: Sequence[dict[str, Any]], python: Path, tmp: Path) -> list[decide.History]:
    """``docs`` pushed to an SQLite store, read back as series, Otava's change points attributed (from the
    documents either side of each, as `fsmatrix history` reads them)."""
    with database.Store.open(store_urls.parse(f"sqlite:///{tmp / 'store.sqlite'}")) as opened:
        opened.push([Result.read(d) for d in docs])
        series = stored_history.load_series(opened)
        _, detected = otava.detect(python, [s.values for s in series])
        found = [[(f.index, f.p) for f in points] for points in detected]
        documents = stored_history.documents(opened, decide.to_read(series, found))
    return [decide.history(s, cps, documents) for s, cps in zip(series, found, strict=True)]


# --------------------------------------------------------------------------------------------
# the detector, pinned on seeded synthetic series


def test_detector_no_change_step_and_drift(otava_python: Path) -> None:
    rng = random.Random(39)
    flat = [rng.gauss(1.0, 0.02) for _ in range(60)]
    step = step_values(30, 30, 1.2, seed=40, spread=0.02)
    drift = [1.0 + 0.2 * i / 59 + rng.gauss(0, 0.02) for i in range(60)]  # 20 % over 60 runs, no step
    version, found = otava.detect(otava_python, [flat, step, drift, [1.0], []])
    assert version == "0.8.0"
    assert found[0] == []
    assert [f.index for f in found[1]] == [30] and found[1][0].p < 1e-10
    # drift is cut into steps where the t-test tells the levels apart (Otava has no trend model): pinned
    assert [f.index for f in found[2]] == DRIFT_CUTS
    assert found[3] == [] and found[4] == []
    # deterministic: the same series, the same answer
    assert otava.detect(otava_python, [flat, step, drift, [1.0], []]) == (version, found)


# --------------------------------------------------------------------------------------------
# attribution


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"provenance.kernel": "6.12.57+deb13-amd64"}, {"kernel": ["6.18.44-fc-v782", "6.12.57+deb13-amd64"]}),
        (
            {"params.vm.kernel": "/srv/kernels/linux-image-6.12.deb"},
            {"vm.kernel": [None, "/srv/kernels/linux-image-6.12.deb"]},
        ),
        (
            {"provenance.image": {"name": "fsmatrix-guest-trixie", "sha256": "ab" * 32}},
            {"image": [None, "fsmatrix-guest-trixie (sha256 abababababab)"]},
        ),
        (
            {"provenance.tools.gtm": "GT.M V7.1-006 Linux x86_64"},
            {"tools.gtm": ["GT.M V7.0-005 Linux x86_64", "GT.M V7.1-006 Linux x86_64"]},
        ),
        (
            {"provenance.host.machine_id": "00c0ffee00c0ffee"},
            {"host.machine_id": ["9123bf7b07c69679", "00c0ffee00c0ffee"]},
        ),
    ],
    ids=["guest-kernel", "vm.kernel", "image", "tool-version", "host"],
)
def test_a_change_point_names_exactly_what_changed(
    change: dict[str, Any], named: dict[str, list[Any]], otava_python: Path, tmp_path: Path
) -> None:
    values = step_values(16, 16, 1.25, seed=7)
    docs = [document(i, v, change=change if i >= 16 else None) for i, v in enumerate(values)]
    (found,) = histories(docs, otava_python, tmp_path)
    assert len(found.series.points) == 32
    (cp,) = found.change_points
    assert cp.index == 16 and cp.changed == named
    assert 1.2 < cp.ratio < 1.3 and cp.interval[0] < cp.ratio < cp.interval[1]
    assert cp.bisect is None


def test_run_local_noise_is_not_a_change(otava_python: Path, tmp_path: Path) -> None:
    """A step with only run-local fields different (run id, times, loop device, values read back)."""
    values = step_values(16, 16, 1.25, seed=8)
    docs = []
    for i, v in enumerate(values):
        doc = document(i, v, run_id=f"night-{i}")
        doc["storage"]["data_device"] = f"/dev/loop{i}"
        doc["details"]["gtm"]["readback"]["free_blocks"] = i
        doc["provenance"]["hostname"] = f"runner-{i}"
        docs.append(doc)
    (found,) = histories(docs, otava_python, tmp_path)
    (cp,) = found.change_points
    assert cp.changed == {} and not cp.attributed


def test_bisect_command_for_a_commit_range_of_a_known_repository() -> None:
    def made(commit: str, value: float, i: int) -> Result:
        bisect = {"commit": commit, "repo": "/src/linux", "settings": {"vm.kernel": f"/k/{commit}.deb"}}
        return Result.read(document(i, value, change={"provenance.bisect": bisect}))

    before, after = made("a" * 40, 1.0, 0), made("b" * 40, 1.3, 1)
    series = stored_history.Series("c", "elapsed_s", "lower", "h", "g", "label", ())
    command = decide.bisect_command(series, before, after, 1.3)
    assert command == (
        f"fsmatrix bisect --repo /src/linux --good {'a' * 40} --bad {'b' * 40} "
        "--matrix MATRIX --only 'c' --metric elapsed_s --prepare CMD"
    )
    assert decide.bisect_command(series, before, after, 0.8) is None  # faster: nothing for bisect to find
    assert decide.bisect_command(series, before, before, 1.3) is None  # the same commit
    assert decide.changed(before, after)["bisect.commit"] == ["a" * 40, "b" * 40]


# --------------------------------------------------------------------------------------------
# the command: a store round trip, SQLite and PostgreSQL


def write_run(run_dir: Path, docs: Sequence[dict[str, Any]]) -> Path:
    cell = docs[0]["cell_id"]
    (run_dir / cell).mkdir(parents=True)
    for k, doc in enumerate(docs, 1):
        (run_dir / cell / f"r{k}.json").write_text(json.dumps({**doc, "run_id": run_dir.name, "repeat": k}))
    (run_dir / "matrix.json").write_text(
        json.dumps({"name": run_dir.name, "cells": [{"id": cell, "params": docs[0]["params"]}]})
    )
    return run_dir


def cli(*args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    """``fsmatrix ARGS`` in this process (conftest.invoke), without the store URL or libpq settings of
    the environment; ``check``: the exit status it must have."""
    done = invoke(*args, env={k: None for k in os.environ if k == store_urls.ENV or k.startswith("PG")})
    if check is not None:
        assert done.returncode == check, done.stdout + done.stderr
    return done


@pytest.fixture
def two_builds(tmp_path: Path) -> list[Path]:
    """Two runs of 12 repeats each: the second with gtm.global_buffers 64 from a settings file."""
    values = step_values(12, 12, 1.8, seed=11)
    settings = {"file": "gb64.yaml", "sha256": "cd" * 32, "values": {"gtm.global_buffers": 64}}
    before = [document(i, v) for i, v in enumerate(values[:12])]
    after = [
        document(12 + i, v, change={"provenance.settings": settings, "params.gtm.global_buffers": 64})
        for i, v in enumerate(values[12:])
    ]
    return [write_run(tmp_path / "before", before), write_run(tmp_path / "after", after)]


def check_history(url: str, runs: Sequence[Path], tmp: Path) -> None:
    pushed = cli("results", "push", *map(str, runs), "--store", url)
    assert "24 new" in pushed.stdout
    done = cli("history", "--store", url, "--format", "json", "--html", str(tmp / "trends"))
    answer = json.loads(done.stdout)
    assert answer["detector"] == "Apache Otava 0.8.0" and answer["threshold"] == 0.001
    (series,) = answer["series"]
    assert series["metric"] == "elapsed_s" and series["direction"] == "lower" and len(series["points"]) == 24
    assert [p["run_id"] for p in series["points"]] == ["before"] * 12 + ["after"] * 12
    (cp,) = series["change_points"]
    assert cp["index"] == 12 and cp["before_run"] == "before r12" and cp["after_run"] == "after r1"
    assert cp["changed"] == {"gtm.global_buffers": [35000, 64], "settings": [None, "gb64.yaml (sha256 cdcdcdcdcdcd)"]}
    assert 1.7 < cp["ratio"] < 1.9 and cp["interval"][0] < cp["ratio"] < cp["interval"][1] and cp["p"] < 1e-6
    assert (tmp / "trends" / "index.html").exists()
    again = cli("results", "push", *map(str, runs), "--store", url)
    assert "0 new, 24 already there" in again.stdout
    assert json.loads(cli("history", "--store", url, "--format", "json").stdout) == answer
    failing = cli("history", "--store", url, "--fail-over", "50%", check=1)
    assert "1 change points (1 attributed" in failing.stdout and "gtm.global_buffers 35000 → 64" in failing.stdout
    assert "worse by more than 50%" in failing.stderr
    cli("history", "--store", url, "--fail-over", "90%")


def test_history_round_trip_sqlite(two_builds: list[Path], tmp_path: Path, otava_python: Path) -> None:
    check_history(f"sqlite:///{tmp_path / 'store.sqlite'}", two_builds, tmp_path)


@pytest.fixture(scope="module")
def postgres() -> Iterator[Any]:
    if not available():
        pytest.skip("PostgreSQL 15's initdb (make deps) and runuser are needed")
    with cluster("unused-password-of-the-pusher-role") as server:
        yield server


@pytest.mark.system
@pytest.mark.root(reason="needs root: runs PostgreSQL as the postgres OS user")
def test_history_round_trip_postgresql(
    two_builds: list[Path], tmp_path: Path, postgres: Any, otava_python: Path
) -> None:
    postgres.create_database("history")
    check_history(postgres.url("history"), two_builds, tmp_path)


# --------------------------------------------------------------------------------------------
# bad input


def test_bad_input_is_one_line(two_builds: list[Path], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    cli("results", "push", *map(str, two_builds), "--store", url)
    for args, status, words in [
        (["--since", "last tuesday"], 2, "--since 'last tuesday': not a date"),
        (
            ["--metric", "bogus_s"],
            2,
            "--metric 'bogus_s': no stored result has it as a key or work metric; known: elapsed_s",
        ),
        (["--fail-over", "lots"], 2, "threshold 'lots'"),
        (["--threshold", "2"], 2, "--threshold"),
        (["--store", "postgresql://nobody@/nothing?host=/nonexistent-socket-dir"], 1, "cannot connect"),
        (["--store", "mysql://x/y"], 2, "mysql"),
    ]:
        done = (
            cli("history", "--store", url, *args, check=status)
            if "--store" not in args
            else cli("history", *args, check=status)
        )
        assert words in done.stderr, done.stderr
        errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]  # click adds its usage
        assert "Traceback" not in done.stderr and len(errors) == 1, done.stderr


# --------------------------------------------------------------------------------------------
# trend pages, in headless Chromium as the report page is


def test_trend_pages_render_marked_and_load_nothing(otava_python: Path, tmp_path: Path) -> None:
    values = step_values(16, 16, 1.25, seed=9)
    change = {"provenance.tools.gtm": "GT.M V7.1-006 Linux x86_64"}
    docs = [document(i, v, change=change if i >= 16 else None) for i, v in enumerate(values)]
    found = histories(docs, otava_python, tmp_path)
    index = trends.write_pages(found, tmp_path / "trends", title="History of a test store")
    (page,) = [p for p in (tmp_path / "trends").glob("*.html") if p.name != "index.html"]
    assert page.name in index.read_text() and "1 series, 1 change points" in index.read_text()
    source = page.read_text(encoding="utf-8")
    assert not EXTERNAL_REFERENCE.search(source)
    dom, requested = render(page, tmp_path)
    assert requested == []
    assert 'http-equiv="Content-Security-Policy"' in dom and "default-src 'none'" in dom
    (figure,) = re.findall(r'<figure class="chart">\s*<svg.*?</svg>\s*<figcaption>(.*?)</figcaption>', dom, re.S)
    assert "32 runs, 1 change points" in figure
    assert "tools.gtm GT.M V7.0-005 Linux x86_64 → GT.M V7.1-006 Linux x86_64" in dom  # the table
    assert "<path" in dom  # drawn: matplotlib's text is paths, the change point's label among them
    bare = tmp_path / "bare.html"
    bare.write_text(without_csp(source), encoding="utf-8")
    assert render(bare, tmp_path)[1] == []
    # and a screenshot: the page is drawn, not blank (the red change-point line is on it)
    shot = tmp_path / "trend.png"
    subprocess.run(
        [shutil.which("chromium") or "chromium", *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'shot'}",
         f"--screenshot={shot}", "--window-size=1200,900", page.as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    pixels = matplotlib.image.imread(shot)[:, :, :3]
    red = (
        (abs(pixels[:, :, 0] - 0.8) < 0.05) & (abs(pixels[:, :, 1] - 0.2) < 0.05) & (abs(pixels[:, :, 2] - 0.2) < 0.05)
    )
    assert red.sum() > 100  # the change point's line and label (#c33)


# --------------------------------------------------------------------------------------------
# Otava's virtualenv: made once, never half


def test_no_pypi_no_half_virtualenv_and_one_line(two_builds: list[Path], tmp_path: Path) -> None:
    """Where pip cannot reach an index, the first `fsmatrix history` says so in one line (exit 1) and
    leaves nothing that looks like a virtualenv; a virtualenv made for another Otava is not taken."""
    cache = tmp_path / "cache"
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    cli("results", "push", *map(str, two_builds), "--store", url)
    env = {**cli_env(), "FSMATRIX_CACHE": str(cache), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "none")}
    done = subprocess.run([*FSMATRIX, "history", "--store", url], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 1, done.stderr
    making, error = done.stderr.strip().splitlines()  # what it tried, and why it could not
    assert making.startswith("making Otava's virtualenv") and "Traceback" not in done.stderr
    assert error.startswith("fsmatrix: error: Otava's virtualenv: pip install apache-otava==0.8.0 failed (exit 1)")
    assert sorted(p.name for p in cache.iterdir()) == [".otava-venv.lock"]  # no half virtualenv
    (cache / otava.VENV_NAME / "bin").mkdir(parents=True)
    (cache / otava.VENV_NAME / "bin" / "python").symlink_to(sys.executable)
    (cache / otava.VENV_NAME / otava.MARKER).write_text("apache-otava==0.7.0\n")
    assert not otava.ready(cache / otava.VENV_NAME)
    (cache / otava.VENV_NAME / otava.MARKER).write_text(otava.REQUIREMENT + "\n")
    assert otava.ready(cache / otava.VENV_NAME)


def test_a_failing_otava_is_one_line(tmp_path: Path) -> None:
    """An interpreter without Otava (this one: fsmatrix's own environment) fails the call, named."""
    with pytest.raises(
        otava.OtavaUnavailable, match=r"failed \(exit 1\): ModuleNotFoundError: No module named 'otava'"
    ):
        otava.detect(Path(sys.executable), [[1.0, 2.0, 3.0]])
