"""``fsmatrix bisect`` end to end on the host backend: real GT.M 3n+1 runs, a throwaway repository of
8 commits whose settings file makes 3n+1 spell its keys from a known commit on (about twice the CPU
seconds), interrupted with Ctrl-C after a few runs (exit 130, nothing left behind), then resumed by bisect.yml's
own step (.github/scripts/bisect.sh, as the workflow runs it). It names that commit, posts the
summary, leaves no clone, loop device or mount behind; the same command again runs nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FSMATRIX, attached_under, mounted_under, needs_root
from test_bisect_git import MATRIX, ONLY, SETTINGS, make_repo
from test_workflows import bash, checkout, step, workflow

pytestmark = [needs_root, pytest.mark.system]


def test_bisect_on_the_host_names_the_commit_that_spelled_the_keys(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    checkout(workspace / "fsmatrix")
    shas = make_repo(workspace / "under-test", 8, culprit=5)
    (tmp_path / "m.yaml").write_text(MATRIX)
    summary = tmp_path / "summary.md"
    env = {
        "REPO": "under-test",
        "GOOD": shas[0],
        "BAD": "main",
        "MATRIX_FILE": str(tmp_path / "m.yaml"),
        "CELL": ONLY,
        "PREPARE": "",
        "SETTINGS_FILE": SETTINGS,
        "THRESHOLD": "5%",
        "BACKEND": "host",
        "RESULTS": "bisect-results",
        "FSMATRIX": "fsmatrix/.venv/bin/fsmatrix",
        "GITHUB_STEP_SUMMARY": str(summary),
        "WORKDIR": str(tmp_path / "work"),
    }
    args = [*FSMATRIX, "bisect", "--repo", "under-test", "--good", shas[0], "--bad", "main",
            "--matrix", env["MATRIX_FILE"], "--only", ONLY, "--settings-file", SETTINGS,
            "--results", "bisect-results", "--workdir", env["WORKDIR"]]  # fmt: skip
    results = workspace / "bisect-results"
    work = tmp_path / "work"
    # Ctrl-C (SIGINT to the whole process group, as a terminal sends it) after a few runs: exit 130,
    # nothing left behind.
    first = subprocess.Popen(
        args, cwd=workspace, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 600
    while len(list(results.glob("*/*/r*.json"))) < 8 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGINT)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 130, err.decode()[-3000:]
    assert not (work / "bisect").exists() and not attached_under(work) and not mounted_under(work)
    interrupted = len(list(results.glob("*/*/r*.json")))
    # bisect.yml's own step: the same options, so it resumes.
    bash(step(workflow("bisect.yml"), "bisect", "Bisect"), workspace, env)
    report = json.loads((results / "bisect.json").read_text())
    assert report["culprit"]["sha"] == shas[5] and report["confirmation"]["confirmed"], report["first_line"]
    assert f'at commit {shas[5][:12]} "spell the keys"' in report["first_line"]
    assert summary.read_text().splitlines()[0] == report["first_line"]
    docs = [json.loads(p.read_text()) for p in results.glob("*/*/r*.json")]
    assert docs and {d["status"] for d in docs} == {"passed"}
    assert all(d["provenance"]["bisect"]["commit"] in shas for d in docs)
    assert report["reused_runs"] >= interrupted >= 8
    assert not (work / "bisect").exists() and not attached_under(work) and not mounted_under(work)
    # The same command again: every run is stored, so it decides the same without running anything.
    again = subprocess.run(args, cwd=workspace, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.splitlines()[0] == report["first_line"]
    resumed = json.loads((results / "bisect.json").read_text())
    assert resumed["reused_runs"] == report["runs"]["total"]
