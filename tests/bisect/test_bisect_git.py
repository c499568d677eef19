"""``fsmatrix bisect`` on a real throwaway git repository: the range read, each commit in a
temporary clone of its own, --prepare and --settings-file, the cell's runs stored with the commit in
their provenance, resume after Ctrl-C, cleanup, and bad input. The runs themselves come from a
stand-in backend that draws their values from known distributions by the cell's settings (the one
place a stand-in is right here: the real runs are tests/bisect/test_bisect_host.py's)."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FSMATRIX
from fsmatrix.agent import job
from fsmatrix.bisect import driver, session
from fsmatrix.bisect import git as bisect_git
from fsmatrix.bisect.lab import GitLab, LabSetup, clones_root, one_cell
from fsmatrix.cli import main
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell

MATRIX = """\
name: bisect-test
axes:
  filesystem: [tmpfs]
  workload:
    - threen1: {start: 1, end: 50000, workers: 2, block: 5000, keys: integer}
    - threen1: {start: 1, end: 60000, workers: 2, block: 5000, keys: integer}
defaults:
  storage.disk_size: 1G
  gtm.global_buffers: 4000
"""
ONLY = "tmpfs-threen1-1-50000-*"
SETTINGS = "bisect-settings.yaml"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.org",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.org",
}


def sh(*args: str, cwd: Path) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=True, env={**os.environ, **GIT_ENV})
    return done.stdout.strip()


def make_repo(where: Path, n: int, culprit: int, broken: tuple[int, ...] = ()) -> list[str]:
    """A repository of a root commit (the good end) and ``n`` commits after it; from commit ``culprit``
    on, its settings file makes 3n+1 spell its keys (slower); a commit in ``broken`` has a file
    `broken` (the test's --prepare fails there). Returns the shas, the good end first."""
    where.mkdir()
    sh("git", "init", "-q", "-b", "main", cwd=where)
    shas = []
    for i in range(n + 1):
        keys = "spelled" if i >= culprit else "integer"
        (where / SETTINGS).write_text(f"workload.threen1.keys: {keys}\n")
        (where / "broken").unlink(missing_ok=True)
        if i in broken:
            (where / "broken").write_text("x\n")
        (where / "code.txt").write_text(f"version {i}\n")
        sh("git", "add", "-A", cwd=where)
        sh("git", "commit", "-q", "-m", f"change {i}" if i != culprit else "spell the keys", cwd=where)
        shas.append(sh("git", "rev-parse", "HEAD", cwd=where))
    return shas


class StandInBackend:
    """Draws elapsed_s and cpu_busy_s from LogNormal(ln median, sigma) by the cell's keys setting."""

    name = "standin"

    def __init__(self, medians: dict[str, float], sigma: float = 0.02, seed: int = 0, stop_after: int | None = None):
        self.medians, self.sigma, self.rng = medians, sigma, np.random.default_rng(seed)
        self.stop_after, self.made = stop_after, 0

    def preflight(self, cells: list[MatrixCell]) -> None:
        pass

    def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
        if self.stop_after is not None and self.made >= self.stop_after:
            raise KeyboardInterrupt
        self.made += 1
        keys = cell.params["workload"]["threen1"]["keys"]
        value = self.medians[keys] * float(np.exp(self.rng.normal(0, self.sigma)))
        doc = job.result_document(
            job.CellRepeat(cell.spec, cell.id, repeat),
            status="passed",
            reason=None,
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            provenance=self.environment(),
        )
        doc.update(metrics={"elapsed_s": value, "cpu_busy_s": value * 0.9}, duration_s=value)
        return doc

    def environment(self) -> dict[str, Any]:
        return {"backend": self.name}

    def close(self) -> None:
        pass


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Any]:
    matrix_file = tmp_path / "m.yaml"
    matrix_file.write_text(MATRIX)
    return {"matrix_file": matrix_file, "base": one_cell(matrix_file, ONLY), "tmp": tmp_path}


def bisect_repo(
    setup: dict[str, Any],
    repo: Path,
    good: str,
    bad: str,
    backend: StandInBackend,
    *,
    prepare: str | None = None,
    plan: driver.Plan | None = None,
) -> dict[str, Any]:
    """What `fsmatrix bisect` does after checking its options, with the stand-in backend."""
    tmp = setup["tmp"]
    lab_setup = LabSetup(
        repo=repo,
        base=setup["base"],
        matrix_file=setup["matrix_file"],
        prepare=prepare,
        settings_file=None if prepare else SETTINGS,
        results_root=tmp / "results",
        workdir=tmp / "work",
    )
    return session.run(lab_setup, bisect_git.commits(repo, good, bad), backend, plan or driver.Plan())  # type: ignore[arg-type]


def docs_under(results: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*/*/r*.json"))]


def repo_state(repo: Path) -> tuple[str, str, str]:
    return (
        sh("git", "rev-parse", "HEAD", cwd=repo),
        sh("git", "status", "--porcelain", "--ignored", cwd=repo),
        sh("git", "for-each-ref", cwd=repo),
    )


def test_bisect_names_the_commit_that_spelled_the_keys(setup: dict[str, Any]) -> None:
    repo = setup["tmp"] / "repo"
    shas = make_repo(repo, 8, culprit=5)
    before = repo_state(repo)
    report = bisect_repo(setup, repo, shas[0], "main", StandInBackend({"integer": 1.0, "spelled": 2.0}))
    assert report["finding"] == "culprit" and report["culprit"]["sha"] == shas[5], report["first_line"]
    assert report["culprit"]["subject"] == "spell the keys" and report["confirmation"]["confirmed"]
    results = setup["tmp"] / "results"
    md = (results / "bisect.md").read_text()
    assert md.splitlines()[0] == report["first_line"] and "spell the keys" in md.splitlines()[0]
    assert json.loads((results / "bisect.json").read_text())["culprit"]["sha"] == shas[5]
    # Every run under a run id naming its phase and commit, labelled as the named cell on purpose,
    # its provenance naming the commit and the id its settings give.
    docs = docs_under(results)
    assert docs and {d["cell_id"] for d in docs} == {setup["base"].id}
    for doc in docs:
        bisected = doc["provenance"]["bisect"]
        assert doc["run_id"].endswith(bisected["commit"][:12]) and bisected["run_id"] == doc["run_id"]
        spelled = shas.index(bisected["commit"]) >= 5
        assert doc["params"]["workload"]["threen1"]["keys"] == ("spelled" if spelled else "integer")
        assert (bisected["settings_cell_id"] == setup["base"].id) == (not spelled)  # the matrix's own keys
    assert (results / "prepared" / f"{shas[5]}.json").is_file()
    # Nothing written into the user's repository; no clone left.
    assert repo_state(repo) == before
    assert not (setup["tmp"] / "work" / "bisect").exists()


def test_prepare_prints_the_settings_and_a_commit_it_fails_on_is_skipped(setup: dict[str, Any]) -> None:
    repo = setup["tmp"] / "repo"
    shas = make_repo(repo, 8, culprit=6, broken=(4,))
    prepare = f'test -e broken && {{ echo "build failed here" >&2; exit 3; }}; pwd > /dev/stderr; cat {SETTINGS}'
    report = bisect_repo(
        setup, repo, shas[0], shas[-1], StandInBackend({"integer": 1.0, "spelled": 2.0}), prepare=prepare
    )
    assert report["culprit"]["sha"] == shas[6], report["first_line"]
    assert report["skipped"] and report["skipped"][0]["sha"] == shas[4]
    assert "--prepare exited with status 3 (build failed here" in report["skipped"][0]["reason"]
    log = setup["tmp"] / "results" / "prepared" / f"{shas[6]}.log"
    clone = Path(log.read_text().strip())
    assert clone.name == shas[6][:12] and clone.parent == clones_root(setup["tmp"] / "work", setup["tmp"] / "results")
    assert not clone.exists()


def test_interrupted_it_cleans_up_and_the_same_command_resumes(setup: dict[str, Any]) -> None:
    repo = setup["tmp"] / "repo"
    shas = make_repo(repo, 4, culprit=3)
    medians = {"integer": 1.0, "spelled": 2.0}
    whole = StandInBackend(medians, seed=1)
    first = bisect_repo(setup, repo, shas[0], shas[-1], whole)
    # Again from scratch in another results directory, interrupted after 15 runs (in the first step).
    setup["tmp"] = setup["tmp"] / "again"
    setup["tmp"].mkdir()
    stopping = StandInBackend(medians, seed=1, stop_after=15)
    with pytest.raises(KeyboardInterrupt):
        bisect_repo(setup, repo, shas[0], shas[-1], stopping)
    assert not (setup["tmp"] / "work" / "bisect").exists()  # no clone left after Ctrl-C
    assert len(docs_under(setup["tmp"] / "results")) == 15
    stopping.stop_after = None
    resumed = bisect_repo(setup, repo, shas[0], shas[-1], stopping)
    assert stopping.made == whole.made  # no run made twice
    assert resumed["culprit"] == first["culprit"] and resumed["reused_runs"] == 15
    # Other options on the same results directory: refused, one line.
    with pytest.raises(UserError, match="holds another bisect"):
        bisect_repo(setup, repo, shas[1], shas[-1], stopping)


def test_a_range_without_a_regression_is_refused_with_the_figures(setup: dict[str, Any]) -> None:
    repo = setup["tmp"] / "repo"
    shas = make_repo(repo, 4, culprit=99)
    report = bisect_repo(setup, repo, shas[0], shas[-1], StandInBackend({"integer": 1.0, "spelled": 2.0}))
    assert report["finding"] == "no regression" and report["first_line"].startswith("No regression to find")
    assert "elapsed_s bad/good ×" in report["first_line"] and "cpu_busy_s bad/good ×" in report["first_line"]


# ----------------------------------------------------------------------------------- bad input


def refused(*args: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The command in-process (CliRunner: a subprocess per case would cost seconds each); it must exit 2
    with one line on stderr and no traceback. Returns the line."""
    monkeypatch.chdir(cwd)
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output, result.output
    assert len(lines) == 1 and lines[0].startswith("fsmatrix: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"--good": "nosuchrev"}, "--good nosuchrev: no such commit in"),
        ({"--bad": "v9"}, "--bad v9: no such commit in"),
        ({"--good": "main"}, "are the same commit"),
        ({"--good": "main", "--bad": "main~2"}, "is not an ancestor of --bad main~2"),
        ({"--only": "xfs-*"}, "matches 0 cells of"),
        ({"--only": "tmpfs-*"}, "matches 2 cells of"),
        ({"--threshold": "five"}, "threshold 'five': expected a percentage"),
        ({"--settings-file": None}, "give --prepare CMD or --settings-file FILE"),
        ({"--prepare": "true"}, "give --prepare CMD or --settings-file FILE (one of them)"),
        ({"--max-rounds": "2"}, "--max-rounds 2: must be at least the minimum rounds"),
        ({"--repo": "notarepo"}, "--repo notarepo: not a git repository"),
        ({"dirty": True}, "has uncommitted changes (1 paths, e.g. code.txt)"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_bad_input_is_one_line_exit_2_and_nothing_checked_out(
    setup: dict[str, Any], change: dict[str, Any], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = setup["tmp"]
    make_repo(tmp / "repo", 3, culprit=2)
    (tmp / "notarepo").mkdir()
    options: dict[str, Any] = {
        "--repo": "repo",
        "--good": "main~3",
        "--bad": "main",
        "--matrix": "m.yaml",
        "--only": ONLY,
        "--settings-file": SETTINGS,
        "--results": "results",
        "--workdir": "work",
    }
    if change.pop("dirty", False):
        (tmp / "repo" / "code.txt").write_text("edited\n")
    options.update(change)
    args = [x for k, v in options.items() if v is not None for x in (k, v)]
    line = refused("bisect", *args, cwd=tmp, monkeypatch=monkeypatch)
    assert expected in line, line
    assert not (tmp / "results").exists() and not (tmp / "work").exists()


def test_good_must_be_on_the_first_parent_line_of_bad(setup: dict[str, Any]) -> None:
    repo = setup["tmp"] / "repo"
    make_repo(repo, 2, culprit=9)
    sh("git", "checkout", "-q", "-b", "side", "main~1", cwd=repo)
    (repo / "side.txt").write_text("side\n")
    sh("git", "add", "-A", cwd=repo)
    sh("git", "commit", "-q", "-m", "on a branch", cwd=repo)
    sh("git", "checkout", "-q", "main", cwd=repo)
    sh("git", "merge", "-q", "--no-ff", "-m", "merge side", "side", cwd=repo)
    with pytest.raises(UserError, match="--good side .* is not on the first-parent line of --bad main"):
        bisect_git.commits(repo, "side", "main")
    listed = bisect_git.commits(repo, "main~2", "main")
    assert [c.subject for c in listed] == ["change 1", "change 2", "merge side"]


def test_what_prepare_prints_is_checked_and_a_bad_commit_skipped(setup: dict[str, Any]) -> None:
    repo = setup["tmp"] / "repo"
    make_repo(repo, 1, culprit=9)
    commit = bisect_git.commits(repo, "main~1", "main")[1]

    def prepared(prepare: str | None, settings_file: str | None = None) -> str | None:
        results = setup["tmp"] / f"results-{len(list(setup['tmp'].glob('results-*')))}"
        lab_setup = LabSetup(
            repo=repo,
            base=setup["base"],
            matrix_file=setup["matrix_file"],
            prepare=prepare,
            settings_file=settings_file,
            results_root=results,
            workdir=setup["tmp"] / "work",
        )
        lab = GitLab(lab_setup, StandInBackend({}))  # type: ignore[arg-type]
        try:
            return lab.prepare(commit).failure
        finally:
            lab.close()

    assert prepared("echo 'gtm.global_buffers: 5000'") is None
    assert prepared("true") is None  # nothing printed: no settings
    assert "printed '42', not a mapping of settings" in (prepared("echo 42") or "")
    assert "unknown setting 'gtm.buffers'" in (prepared("echo 'gtm.buffers: 1'") or "")
    assert "gtm.global_buffers: 'many' is not allowed" in (prepared("echo 'gtm.global_buffers: many'") or "")
    assert "--settings-file nowhere.yaml: not in commit" in (prepared(None, "nowhere.yaml") or "")
    assert not (setup["tmp"] / "work" / "bisect").exists()


def test_bad_input_through_the_installed_command_is_one_line_without_a_traceback(setup: dict[str, Any]) -> None:
    tmp = setup["tmp"]
    make_repo(tmp / "repo", 2, culprit=1)
    (tmp / "repo" / "code.txt").write_text("edited\n")
    args = ["bisect", "--repo", "repo", "--good", "main~2", "--bad", "main", "--matrix", "m.yaml", "--only", ONLY]
    done = subprocess.run(
        [*FSMATRIX, *args, "--settings-file", SETTINGS],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("fsmatrix: error: --repo repo has uncommitted changes")


def test_a_failure_midway_leaves_no_clone(setup: dict[str, Any]) -> None:
    repo = setup["tmp"] / "repo"
    shas = make_repo(repo, 3, culprit=2)
    prepare = f'[ "$FSMATRIX_BISECT_COMMIT" = {shas[-1]} ] && exit 1; cat {SETTINGS}'
    with pytest.raises(
        UserError, match=f"the bad end {shas[-1][:12]} cannot be tested: --prepare exited with status 1"
    ):
        bisect_repo(setup, repo, shas[0], shas[-1], StandInBackend({}), prepare=prepare)
    assert (setup["tmp"] / "results" / "prepared" / f"{shas[0]}.json").is_file()  # the good end was cloned
    assert not (setup["tmp"] / "work" / "bisect").exists()
