"""The GitHub Actions workflows, replayed here: the exact `run:` commands of their steps, in order.

`uses:` steps are what GitHub does for us (checkout, artifact upload/download) and are simulated
with directories; every `run:` step that does fsmatrix's work is read from the workflow file and
executed with bash on the host backend, with the environment the workflow gives it. The workflows
as a whole (job graph, expressions, artefacts, the reusable gate.yml) run with act in
tests/ci/test_act.py (`make test-act`: marker `act`, out of `make test` for CI's time); these replays
stay in `make test`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO, needs_root

pytestmark = [needs_root, pytest.mark.system]

WORKFLOWS = REPO / ".github" / "workflows"

SMALL = """\
name: wf
axes:
  filesystem: [tmpfs, ext4]
defaults:
  workload.threen1: {start: 1, end: 50000, workers: 2, block: 5000, keys: integer}
  storage.disk_size: 1G
  gtm.global_buffers: 4000
repeat: 2
"""


# The gate's settings in these tests: what they check is the workflow's logic, deterministically
# both ways (a 50 % threshold that an A/A pair of these runs never crosses, and a regression of
# several times the work, which always does), in few runs. The workflow's own settings (8 + 8 pairs,
# 5 %) are what `python -m fsmatrix.bench.gate` measured on a quiet machine (docs/measurements.md).
# The gate on this machine: the host backend (tmpfs cells; pr-gate.yml's qemu default needs the image).
# One look of 3 pairs (MAX_PAIRS = REPEATS): pr-gate.sh's adding of pairs is tested with a stand-in in
# tests/ci/test_gate_backend.py.
SMALL_GATE = {
    "REPEATS": "3",
    "MAX_PAIRS": "3",
    "PAIRS_STEP": "1",
    "CONFIRM_REPEATS": "3",
    "THRESHOLD": "0.5",
    "FSMATRIX_GATE_BACKEND": "host",
}


def workflow(name: str) -> dict[str, Any]:
    return yaml.safe_load((WORKFLOWS / name).read_text())  # type: ignore[no-any-return]


def step(wf: dict[str, Any], job: str, name_or_id: str) -> str:
    """The `run:` text of a step, found by its id or the start of its name."""
    for s in wf["jobs"][job]["steps"]:
        if s.get("id") == name_or_id or s.get("name", "").startswith(name_or_id):
            assert "${{" not in s["run"], "a replayed step must take its inputs from env, not expressions"
            return s["run"]  # type: ignore[no-any-return]
    raise AssertionError(f"no step {name_or_id!r} in job {job}")


def checkout(where: Path, runner: Path = REPO / "runner", prelude: str = "") -> Path:
    """What actions/checkout gives a job: the repository (here: links to it, and its virtualenv).
    ``prelude``: shell lines the checkout's `fsmatrix` runs first."""
    where.mkdir(parents=True, exist_ok=True)
    for name in (".github", "matrix", "Makefile", "pyproject.toml"):
        (where / name).symlink_to(REPO / name)
    venv_bin = where / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    # The checkout's own code: PYTHONPATH puts `runner` first, ahead of the editable install.
    (venv_bin / "fsmatrix").write_text(
        f'#!/bin/sh\n{prelude}PYTHONPATH="{runner}" exec "{REPO}/.venv/bin/python" -m fsmatrix "$@"\n'
    )
    (venv_bin / "fsmatrix").chmod(0o755)
    return where


def bash(script: str, cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode in ok, f"{script}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def test_matrix_workflow_expand_shards_merge_report(tmp_path: Path) -> None:
    wf = workflow("matrix.yml")
    matrix_file = tmp_path / "wf.yaml"
    matrix_file.write_text(SMALL)
    env = {
        "MATRIX_FILE": str(matrix_file),
        "BACKEND": "host",
        "FILTER": "*",
        "REPEATS": "2",
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
    }

    # job "expand"
    bash(step(wf, "expand", "expand"), checkout(tmp_path / "expand"), env)
    key, _, value = (tmp_path / "output").read_text().strip().partition("=")
    shards = json.loads(value)["include"]
    assert key == "shards" and len(shards) == 2

    # job "run", one per shard, each in its own checkout; then its artifact
    for shard in shards:
        job_dir = checkout(tmp_path / f"run-{shard['shard']}")
        bash(step(wf, "run", "Run shard"), job_dir, {**env, "CELLS": shard["cells"]})
        shutil.copytree(job_dir / "results", tmp_path / "report" / "shards" / f"results-shard-{shard['shard']}")

    # job "report": artifacts downloaded by pattern into shards/<artifact name>/
    bash(
        step(wf, "report", "Merge"),
        checkout(
            tmp_path / "report",
        ),
        env,
    )
    merged = tmp_path / "report" / "results" / "matrix"
    docs = [json.loads(p.read_text()) for p in merged.rglob("r*.json")]
    assert len(docs) == 4 and {d["status"] for d in docs} == {"passed"}
    assert len({d["cell_id"] for d in docs}) == 2
    assert (tmp_path / "report" / "report" / "report.html").stat().st_size > 10_000
    assert "| 1..50,000 |" in (tmp_path / "summary.md").read_text()


def _regressed_runner(where: Path, only_when: str = "") -> Path:
    """A copy of the code in which every 3n+1 number costs extra work: a real code regression
    (``only_when``: an M condition that must hold too, e.g. on an environment variable)."""
    runner = where / "runner"
    shutil.copytree(REPO / "runner", runner, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    routine = runner / "fsmatrix" / "agent" / "workloads" / "threen1" / "threen1.m"
    text = routine.read_text()
    marker = " set len=v\n"
    assert marker in text
    # Several times the work per number: far beyond the threshold the test gates with, whatever the noise.
    condition = f" if {only_when}" if only_when else ""
    routine.write_text(text.replace(marker, f" set len=v\n{condition} new junk for junk=1:1:600 if junk*junk\n", 1))
    return runner


def _run_gate(tmp_path: Path, head_runner: Path, prelude: str = "") -> tuple[subprocess.CompletedProcess[str], Path]:
    """pr-gate.yml's gate step on a base checkout and a head checkout of ``head_runner``; its exit and
    its job summary. The gate's matrix (and script, and comparison) are the base's: the judge is not
    the judged."""
    wf = workflow("pr-gate.yml")
    workspace = tmp_path / "ws"
    base_dir = checkout(workspace / "base")
    checkout(workspace / "head", runner=head_runner, prelude=prelude)
    (base_dir / "matrix").unlink()
    (base_dir / "matrix").mkdir()
    (base_dir / "matrix" / "pr.yaml").write_text(SMALL.replace("[tmpfs, ext4]", "[tmpfs]"))
    summary = tmp_path / "summary.md"
    env = {**{k: str(v) for k, v in wf["env"].items()}, "GITHUB_STEP_SUMMARY": str(summary), **SMALL_GATE}
    return bash(step(wf, "gate", "Run base and head"), workspace, env, ok=(0, 1)), summary


def _verdict(tmp_path: Path, gate_results: Path) -> subprocess.CompletedProcess[str]:
    """pr-verdict.yml, on a GitHub-hosted runner: the default branch's fsmatrix judges the uploaded
    results, at the gate's threshold (a verdict at another one would judge another gate)."""
    verdict = workflow("pr-verdict.yml")
    verdict_dir = checkout(tmp_path / "verdict")
    (verdict_dir / "gate-results").symlink_to(gate_results)
    env = {**verdict["env"], **{k: SMALL_GATE[k] for k in verdict["env"] if k in SMALL_GATE}}
    return bash(step(verdict, "verdict", "Compare and set"), verdict_dir, env, ok=(0, 1))


@pytest.mark.parametrize("head", ["clean", "regressed"])
def test_pr_gate_passes_a_clean_head_and_fails_a_regressed_one(tmp_path: Path, head: str) -> None:
    head_runner = _regressed_runner(tmp_path) if head == "regressed" else REPO / "runner"
    done, summary = _run_gate(tmp_path, head_runner)
    gate_results = tmp_path / "ws" / "gate-results"
    for side in ("base", "head"):
        docs = [json.loads(p.read_text()) for p in (gate_results / side).rglob("r*.json")]
        assert len(docs) == int(SMALL_GATE["REPEATS"]) and {d["status"] for d in docs} == {"passed"}
    assert summary.read_text().strip(), "the comparison goes to the job summary"
    if head == "clean":
        assert done.returncode == 0, done.stdout + done.stderr
        assert not (gate_results / "head-confirm").exists()  # nothing flagged, nothing run again
    else:
        assert done.returncode == 1, done.stdout + done.stderr
        assert "slower" in summary.read_text()
        # the flagged cell ran again, paired, and the regression held: confirmed before failing
        again = [json.loads(p.read_text()) for p in (gate_results / "head-confirm").rglob("r*.json")]
        assert len(again) == int(SMALL_GATE["CONFIRM_REPEATS"]) and {d["status"] for d in again} == {"passed"}
        assert "CONFIRMED regression" in summary.read_text()
    judged = _verdict(tmp_path, gate_results)
    assert judged.returncode == done.returncode, judged.stdout + judged.stderr
    # A clean head never FAILs; with 3 pairs of short runs on a busy machine the gate may not show it
    # below the threshold either: PASS or NOT DECIDED (neutral), whichever, the same in both workflows.
    verdict = (gate_results / "verdict.txt").read_text().strip()
    assert verdict in (("PASS", "NOT DECIDED") if head == "clean" else ("FAIL",)), verdict
    words = {"PASS": "gate PASSED", "NOT DECIDED": "gate NOT DECIDED", "FAIL": "GATE FAILED"}
    assert f"verdict: {verdict}: {words[verdict]}" in judged.stdout
    assert summary.read_text().startswith(f"**fsmatrix gate: {verdict}** after 3 pairs")


def test_pr_gate_passes_a_regression_the_confirmation_does_not_reproduce(tmp_path: Path) -> None:
    """A stand-in for a first batch that a passing disturbance slowed (the real one: a neighbour,
    a backup): the head's code is slow only in its first batch of runs (run id `head`), not when the
    gate runs the flagged cell again (`head-confirm`). The first batch fails, the second does not:
    NOT DECIDED, which the PR workflow leaves neutral (exit 0, a notice, the sentence in the summary)."""
    flaky = _regressed_runner(tmp_path, only_when='$ztrnlnm("FSMATRIX_TEST_SLOW")=1')
    only_first = 'case " $* " in *" --run-id head "*) export FSMATRIX_TEST_SLOW=1 ;; esac\n'
    done, summary = _run_gate(tmp_path, flaky, prelude=only_first)
    results = tmp_path / "ws" / "gate-results"
    assert "REGRESSION" in (results / "first-batch.md").read_text()  # the first batch alone would fail
    assert len(list((results / "head-confirm").rglob("r*.json"))) == int(SMALL_GATE["CONFIRM_REPEATS"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not confirmed:" in summary.read_text() and "::notice title=fsmatrix gate NOT DECIDED::" in done.stdout
    assert summary.read_text().startswith("**fsmatrix gate: NOT DECIDED** after 3 pairs")
    judged = _verdict(tmp_path, results)
    assert judged.returncode == 0 and "verdict: NOT DECIDED: gate NOT DECIDED after confirmation" in judged.stdout


def test_gate_logic_comes_from_the_base_and_the_verdict_runs_no_pr_code() -> None:
    gate = workflow("pr-gate.yml")
    runs = [s["run"] for s in gate["jobs"]["gate"]["steps"] if "run" in s]
    # Every script the gate runs is the base's (the head's code runs only inside its own image).
    scripts = [line.split()[line.split().index("bash") + 1] for run in runs for line in run.splitlines() if line]
    assert scripts and all(path.startswith("base/.github/scripts/") for path in scripts), scripts
    assert runs[-1] == (
        'bash base/.github/scripts/pr-gate.sh base head base/matrix/pr.yaml "$REPEATS" "$THRESHOLD" gate-results'
        ' "$CONFIRM_REPEATS"'
    )
    assert not [s["uses"] for s in gate["jobs"]["gate"]["steps"] if s.get("uses", "").startswith("./head")]
    # The comparison runs in the base's fsmatrix.
    assert 'fsmatrix_in "$base" compare' in (REPO / ".github" / "scripts" / "pr-gate.sh").read_text()
    verdict = workflow("pr-verdict.yml")
    triggers: dict[Any, Any] = verdict
    assert list(triggers[True]) == ["workflow_run"]  # YAML 1.1 reads the key "on" as True
    job = verdict["jobs"]["verdict"]
    assert job["runs-on"] == "ubuntu-latest"  # never a self-hosted runner
    checkouts = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert len(checkouts) == 1 and "ref" not in checkouts[0].get("with", {})  # the default branch only
    assert verdict["permissions"] == {"contents": "read", "actions": "read", "checks": "write"}
    # The verdict is judged as the gate ran: the same threshold and looks.
    for key in ("THRESHOLD", "REPEATS", "PAIRS_STEP", "MAX_PAIRS"):
        assert verdict["env"][key] == gate["env"][key], key
    assert gate["env"]["NOT_DECIDED"] == "neutral"
