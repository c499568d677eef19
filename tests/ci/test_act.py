"""The workflows themselves, run by nektos/act on this machine: the job graph, the expressions, the
`if:` conditions and the artefact names, not only the scripts (tests/ci/test_workflows.py replays those).

act runs each job directly on this host (`-P LABEL=-self-hosted`), in a throwaway repository: a copy of
this checkout committed to a git "server" (a directory: GITHUB_SERVER_URL=file://...). GitHub's own
actions cannot be fetched offline; small stand-ins under tests/ci/act/actions take their place
(`--local-repository`, keyed by the refs the workflows pin): checkout clones from that server,
upload- and download-artifact keep artefacts in a directory. `gh` is a stand-in (tests/ci/act/gh.py)
that records what it was asked and answers the check-runs API as GitHub does. act keeps no step
summary (it empties the file before every step): the throwaway copy of pr-gate.yml copies its gate
step's summary out on exit. Everything runs on the host backend with tiny matrices: the steps really
run (act's `-n` is not a dry run on the host), as root, on loop devices.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO, needs_root
from fsmatrix import matrix
from fsmatrix.bench.throwaway_pg import available, cluster
from test_workflows import SMALL, SMALL_GATE, _regressed_runner

GATE_BACKEND = "FSMATRIX_GATE_BACKEND"  # pr-gate.yml's backend: the repository variable of that name, else qemu

pytestmark = [needs_root, pytest.mark.system, pytest.mark.act]

ACT = REPO / "tests" / "ci" / "act"
WORKFLOWS = REPO / ".github" / "workflows"
SLUG = "acme/fsmatrix"  # the throwaway repository's name on the stand-in server
# Every runner label the workflows use, run on this host.
PLATFORMS = ("self-hosted", "ubuntu-24.04", "ubuntu-latest")
TINY_GATE = SMALL.replace("[tmpfs, ext4]", "[tmpfs]")


def pinned_actions() -> dict[str, Path]:
    """`--local-repository` keys (OWNER/REPO@SHA, exactly as the workflows pin them) -> stand-in."""
    pins = {}
    for workflow in WORKFLOWS.glob("*.yml"):
        for found in re.finditer(r"uses: (actions/([\w-]+))@([0-9a-f]{40})", workflow.read_text()):
            stand_in = ACT / "actions" / found[2]
            assert (stand_in / "action.yml").is_file(), f"{workflow.name} uses {found[1]}: no stand-in in {stand_in}"
            pins[f"{found[1]}@{found[3]}"] = stand_in
    return pins


@pytest.fixture(scope="session")
def act_binary() -> Path:
    """act, built once into the fsmatrix cache (`make act`; quick when it is there)."""
    done = subprocess.run(["bash", str(ACT / "install.sh")], capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    """The Python packages fsmatrix needs, as wheels in a directory (built once per pyproject.toml, kept
    in the fsmatrix cache): the workflows' `pip install`s take them from there (PIP_NO_INDEX), since
    PyPI answers slowly here (about 2 s a request, 80 s an install). The same packages, installed by
    the workflows' own commands. (--use-pep517: an sdist without pyproject.toml, libvirt-python, is
    built in an isolated environment that has `wheel`, which the tests' virtualenv need not have.)"""
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:12]
    where = Path(os.environ.get("FSMATRIX_CACHE", "/var/cache/fsmatrix")) / "act" / f"wheelhouse-{digest}"
    if not (where / ".complete").exists():
        building = where.with_name(where.name + ".tmp")
        shutil.rmtree(building, ignore_errors=True)
        pip = [sys.executable, "-m", "pip", "wheel", "-q", "--use-pep517", "-w", str(building)]
        subprocess.run([*pip, f"{REPO}[dev]", "setuptools>=61"], check=True, timeout=1800)
        for own in building.glob("fsmatrix-*.whl"):
            own.unlink()  # the workflows install fsmatrix from their checkouts
        (building / ".complete").touch()
        shutil.rmtree(where, ignore_errors=True)
        building.rename(where)
    return where


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


# pr-gate.yml's gate step, in the throwaway copy: its step summary copied out when it ends, however it ends.
GATE_STEP = "        run: bash base/.github/scripts/pr-gate.sh "
KEEP_SUMMARY = """\
        run: |
          trap 'cp "$GITHUB_STEP_SUMMARY" "$FSMATRIX_ACT_SUMMARIES/$GITHUB_RUN_ID-$GITHUB_JOB.md"' EXIT
          bash base/.github/scripts/pr-gate.sh """


def throwaway_repository(where: Path, gate: dict[str, str] = SMALL_GATE) -> Path:
    """This checkout's files (as they are in the working tree) committed to a fresh repository, with
    the test's tiny matrices and the gate's small settings (``gate``: test_workflows.SMALL_GATE, or
    others of the same keys), in pr-gate.yml and in pr-verdict.yml, which judges with the same."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        if name and (REPO / name).is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, where / name)
    (where / "matrix" / "act.yaml").write_text(SMALL)
    (where / "matrix" / "pr.yaml").write_text(TINY_GATE)
    # the verdict judges at the gate's threshold (a verdict at another one would judge another gate)
    # (the gate's backend is a repository variable, not a literal: the gate's runs pass it with --var)
    literals = [key for key in gate if key != GATE_BACKEND]
    judged = ["THRESHOLD", "REPEATS", "PAIRS_STEP", "MAX_PAIRS"]  # pr-verdict.yml's copy of the gate's settings
    for name, keys in (("pr-gate.yml", literals), ("pr-verdict.yml", judged)):
        workflow = where / ".github" / "workflows" / name
        text = workflow.read_text()
        for key in keys:
            setting = re.compile(rf'^  {key}: "[^"]*"$', re.M)
            assert setting.search(text), f"{name} sets no {key}"
            text = setting.sub(f'  {key}: "{gate[key]}"', text)
        if name == "pr-gate.yml":
            assert text.count(GATE_STEP) == 1, "pr-gate.yml's gate step changed: update GATE_STEP"
            text = text.replace(GATE_STEP, KEEP_SUMMARY)
        workflow.write_text(text)
    git(where, "init", "-q", "-b", "main")
    commit(where, "base")
    return where


@dataclass
class Act:
    """act on this host, against the stand-in server and artefact store under ``root``."""

    binary: Path
    root: Path
    wheelhouse: Path

    @property
    def server(self) -> Path:
        return self.root / "server"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def gh_calls(self) -> list[list[str]]:
        """Every `gh` command the workflows ran (the stub's record), one argument list each."""
        log = self.root / "gh.log"
        text = log.read_text() if log.exists() else ""
        return [call.strip("\n").split("\n") for call in text.split("\n--\n") if call.strip()]

    def check_runs(self, head_sha: str, slug: str = SLUG) -> dict[str, dict[str, Any]]:
        """The check runs posted on a commit (gh.py's store), by name."""
        runs = (self.root / "checks" / slug / head_sha).glob("*.json")
        return {doc["name"]: doc for doc in (json.loads(p.read_text()) for p in runs)}

    def step_summary(self, run_id: int, job: str) -> str:
        """The step summary pr-gate.yml's gate step wrote in run ``run_id`` (KEEP_SUMMARY)."""
        return (self.root / "summaries" / f"{run_id}-{job}.md").read_text()

    def repository(self, slug: str = SLUG) -> Path:
        """A repository on the stand-in server (created empty)."""
        path = self.server / slug
        path.mkdir(parents=True, exist_ok=True)
        return path

    def __call__(
        self,
        workdir: Path,
        workflow: str,
        event: str,
        payload: dict[str, Any] | None = None,
        variables: dict[str, str] | None = None,
        run_id: int = 1,
        slug: str = SLUG,
        local: dict[str, Path] | None = None,
        secrets: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`act EVENT -W WORKFLOW` in ``workdir`` (a checkout of ``slug``), as run ``run_id``."""
        event_file = self.root / f"event-{run_id}.json"
        event_file.write_text(json.dumps(payload or {}))
        stubs = self.root / "bin"
        stubs.mkdir(exist_ok=True)
        gh = stubs / "gh"
        gh.write_text(f'#!/bin/sh\nexec {sys.executable} {ACT / "gh.py"} "$@"\n')
        gh.chmod(0o755)
        (self.root / "summaries").mkdir(exist_ok=True)
        args = [str(self.binary), event, "-W", workflow, "-C", str(workdir), "-e", str(event_file)]
        for label in PLATFORMS:
            args += ["-P", f"{label}=-self-hosted"]
        # act fetches actions from GITHUB_SERVER_URL too: the keys are full URLs on the stand-in server
        for key, path in {**pinned_actions(), **(local or {})}.items():
            args += ["--local-repository", f"file://{self.server}/{key}={path}"]
        for key, value in {
            "GITHUB_REPOSITORY": slug,
            "GITHUB_SERVER_URL": f"file://{self.server}",
            "GITHUB_RUN_ID": str(run_id),
        }.items():
            args += ["--env", f"{key}={value}"]
        for key, value in (variables or {}).items():
            args += ["--var", f"{key}={value}"]
        # the token act gives the jobs (github.token): gh refuses to run without one
        for key, value in {"GITHUB_TOKEN": "act-test-token", **(secrets or {})}.items():
            args += ["-s", f"{key}={value}"]
        args += ["--action-cache-path", str(self.root / "act-cache"), "--no-cache-server"]
        # The jobs inherit act's environment: not the Python path of the tests' own fsmatrix (every
        # checkout's fsmatrix would be this one), nor a surrounding CI job's GitHub variables.
        dropped = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
        outer_ci = ("GITHUB_", "RUNNER_", "ACTIONS_")
        inherited = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(outer_ci)}
        env = {
            **inherited,
            "PATH": f"{stubs}:{os.environ['PATH']}",
            "FSMATRIX_ACT_ARTIFACTS": str(self.artifacts),
            "FSMATRIX_ACT_GH_LOG": str(self.root / "gh.log"),
            "FSMATRIX_ACT_CHECKS": str(self.root / "checks"),
            "FSMATRIX_ACT_SUMMARIES": str(self.root / "summaries"),
            "XDG_CACHE_HOME": str(self.root / "xdg-cache"),
            "PIP_NO_INDEX": "1",
            "PIP_NO_COMPILE": "1",
            "PIP_FIND_LINKS": str(self.wheelhouse),
        }
        # act's own working directory: it reads .actrc, .env, .secrets and .vars from there.
        done = subprocess.run(args, cwd=self.root, env=env, capture_output=True, text=True, timeout=1800, check=False)
        (self.root / f"act-{run_id}.log").write_text(done.stdout + done.stderr)  # kept with pytest's tmp_path
        return done

    def artifact(self, run_id: int, name: str) -> Path:
        path = self.artifacts / str(run_id) / name
        assert path.is_dir(), f"run {run_id} uploaded no artifact {name}: {sorted(self.artifacts.rglob('*'))[:20]}"
        return path


@pytest.fixture
def act(act_binary: Path, wheelhouse: Path, tmp_path: Path) -> Act:
    (tmp_path / "server").mkdir()
    return Act(act_binary, tmp_path, wheelhouse)


def failed_jobs(done: subprocess.CompletedProcess[str]) -> set[str]:
    """The jobs act reports as failed ("[workflow/job-N] 🏁  Job failed"; -N: a matrix job's number)."""
    jobs = set()
    for line in (done.stdout + done.stderr).splitlines():
        found = re.match(r"\[[^/\]]+/([^\]]+)\]", line)
        if found and "🏁  Job failed" in line:
            jobs.add(re.sub(r"-\d+$", "", found[1].strip()))
    return jobs


def log(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout[-20000:]}\n{done.stderr[-5000:]}"


def test_matrix_workflow_runs_expand_shards_merge_report(act: Act) -> None:
    repo = throwaway_repository(act.repository())
    done = act(
        repo,
        ".github/workflows/matrix.yml",
        "workflow_dispatch",
        {"inputs": {"matrix": "matrix/act.yaml", "backend": "host", "filter": "*", "repeats": "1"}},
        run_id=11,
    )
    assert done.returncode == 0, log(done)
    shards = sorted(p.name for p in (act.artifacts / "11").glob("results-shard-*"))
    assert shards == ["results-shard-0", "results-shard-1"], log(done)
    report = act.artifact(11, "report")
    docs = [json.loads(p.read_text()) for p in (report / "results" / "matrix").rglob("r*.json")]
    assert {d["status"] for d in docs} == {"passed"}, log(done)
    # every cell of the matrix is in the one merged report, each run once, each shard ran one cell
    assert sorted(d["cell_id"] for d in docs) == sorted(c.id for c in matrix.load(repo / "matrix" / "act.yaml").cells)
    for shard in shards:
        assert len(list((act.artifacts / "11" / shard).rglob("r*.json"))) == 1
    assert (report / "report" / "report.html").stat().st_size > 10_000
    # the host backend ran on the runner, set up by setup-fsmatrix: no container image built or used
    assert "Success - Main Set up fsmatrix on the runner (host backend)" in done.stdout, log(done)
    assert "Build or reuse the container image" not in done.stdout, log(done)
    assert {d["provenance"]["host"].get("container_image") for d in docs} == {None}, docs[0]["provenance"]["host"]


ROUTINE = Path("runner") / "fsmatrix" / "agent" / "workloads" / "threen1" / "threen1.m"
# The gate when the base's runs all fail and the head fixes them: no pair to compare, NOT DECIDED at
# every look, whatever the noise. 3 pairs, then 1 more: the gate adds pairs once, then stops at MAX_PAIRS.
UNDECIDED_GATE = {**SMALL_GATE, "PAIRS_STEP": "1", "MAX_PAIRS": "4"}


def synthetic_pr(act: Act, head: str, gate: dict[str, str] = SMALL_GATE) -> tuple[Path, dict[str, Any]]:
    """The throwaway repository with a pull request from branch `feature` to `main`: ``head`` is
    "unchanged" (a documentation edit), "regressed" (every 3n+1 number costs several times the work:
    a real slowdown of the code under test) or "fixes a broken base" (the base's 3n+1 routine divides
    by zero in every run; the head's is the good one). Returns the repository and the pull_request event."""
    repo = throwaway_repository(act.repository(), gate)
    if head == "fixes a broken base":
        good = (repo / ROUTINE).read_text()
        assert " set len=v\n" in good
        (repo / ROUTINE).write_text(good.replace(" set len=v\n", " set len=v\n set len=len/0\n", 1))
        commit(repo, "every 3n+1 run fails")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    if head == "regressed":
        slow = _regressed_runner(act.root / "slow") / "fsmatrix" / "agent" / "workloads" / "threen1" / "threen1.m"
        shutil.copy2(slow, repo / ROUTINE)
    elif head == "fixes a broken base":
        (repo / ROUTINE).write_text(good)
    else:
        with (repo / "README.md").open("a") as readme:
            readme.write("\nA documentation change: the code under test is the same.\n")
    head_sha = commit(repo, f"head: {head}")
    git(repo, "checkout", "-q", "main")
    side = {"repo": {"full_name": SLUG}}
    event = {
        "action": "synchronize",
        "number": 7,
        "pull_request": {
            "number": 7,
            "head": {"sha": head_sha, "ref": "feature", **side},
            "base": {"sha": base, "ref": "main", **side},
        },
        "repository": {"full_name": SLUG},
    }
    return repo, event


@pytest.mark.parametrize("head", ["unchanged", "regressed", "fixes a broken base"])
def test_pr_gate_and_verdict_workflows_on_a_synthetic_pull_request(act: Act, head: str) -> None:
    """pr-gate.yml ends in PASS or NOT DECIDED on an unchanged head (A/A at 3 pairs may be either; both
    leave the job green), a confirmed FAIL on a real slowdown, and NOT DECIDED after adding pairs when
    the base's runs all fail (neutral: the job passes with a notice). The verdict heads the step
    summary; pr-verdict.yml judges the uploaded results again and posts the check run."""
    gate_settings = UNDECIDED_GATE if head == "fixes a broken base" else SMALL_GATE
    repo, event = synthetic_pr(act, head, gate_settings)
    gate = act(
        repo,
        ".github/workflows/pr-gate.yml",
        "pull_request",
        event,
        variables={"FSMATRIX_IN_CONTAINER": "0", GATE_BACKEND: gate_settings[GATE_BACKEND]},
        run_id=21,
    )
    results = act.artifact(21, "pr-gate-results")
    verdict_of_gate = (results / "verdict.txt").read_text().strip()
    pairs = int((results / "pairs.txt").read_text())
    statuses = {
        side: [json.loads(p.read_text())["status"] for p in (results / side).rglob("r*.json")]
        for side in ("base", "head")
    }
    assert statuses["head"] == ["passed"] * pairs, log(gate)
    summary = act.step_summary(21, "gate")
    notice = "::notice title=fsmatrix gate NOT DECIDED::gate NOT DECIDED"
    if head == "unchanged":
        assert gate.returncode == 0 and verdict_of_gate in ("PASS", "NOT DECIDED"), log(gate)
        assert pairs == int(SMALL_GATE["REPEATS"]) and statuses["base"] == ["passed"] * pairs
        assert not (results / "head-confirm").exists()
        assert (notice in gate.stdout) == (verdict_of_gate == "NOT DECIDED"), log(gate)
    elif head == "regressed":
        assert gate.returncode != 0 and failed_jobs(gate) == {"gate"} and verdict_of_gate == "FAIL", log(gate)
        assert pairs == int(SMALL_GATE["REPEATS"]) and statuses["base"] == ["passed"] * pairs
        assert "CONFIRMED regression" in (results / "comparison.md").read_text()
    else:
        # NOT DECIDED at 3 pairs, 1 more pair, NOT DECIDED at 4, the most: the job passes, with the notice
        assert gate.returncode == 0 and verdict_of_gate == "NOT DECIDED", log(gate)
        assert "== not decided after 3 pairs: 1 more pairs" in gate.stdout, log(gate)
        assert "== not decided after 4 pairs, the most the gate runs (MAX_PAIRS)" in gate.stdout, log(gate)
        assert pairs == 4 and statuses["base"] and "passed" not in statuses["base"], statuses
        assert notice in gate.stdout, log(gate)
    sentence = {"PASS": "gate PASSED", "FAIL": "GATE FAILED", "NOT DECIDED": "gate NOT DECIDED"}[verdict_of_gate]
    assert summary.startswith(f"**fsmatrix gate: {verdict_of_gate}** after {pairs} pairs: {sentence}"), summary
    assert summary == (results / "summary.md").read_text()

    # pr-verdict, as workflow_run would start it when pr-gate completes (act does not chain them)
    run = {"id": 21, "event": "pull_request", "head_sha": event["pull_request"]["head"]["sha"]}
    verdict = act(
        repo,
        ".github/workflows/pr-verdict.yml",
        "workflow_run",
        {"action": "completed", "workflow_run": run, "repository": {"full_name": SLUG}},
        run_id=22,
    )
    # NOT DECIDED is no failure of pr-verdict's job either: its check run says neutral
    assert (verdict.returncode == 0) == (verdict_of_gate != "FAIL"), log(verdict)
    [posted] = [call for call in act.gh_calls if call[0] == "api"]
    assert posted[:2] == ["api", f"repos/{SLUG}/check-runs"], posted
    check = act.check_runs(run["head_sha"])["fsmatrix/pr-verdict"]
    conclusion = {"PASS": "success", "FAIL": "failure", "NOT DECIDED": "neutral"}[verdict_of_gate]
    assert (check["status"], check["conclusion"]) == ("completed", conclusion), check
    assert check["output"]["title"].startswith(f"{verdict_of_gate}: {sentence}"), check
    assert check["details_url"] == f"file://{act.server}/{SLUG}/actions/runs/22"


@pytest.mark.parametrize("broken", ["needs", "matrix"])
def test_act_fails_a_broken_workflow_in_the_broken_job(act: Act, broken: str) -> None:
    """A copy of matrix.yml whose fan-out job lost its `needs:` or reads a shard list that does not
    exist: the expand job still passes, and the run job is the one that fails."""
    repo = throwaway_repository(act.repository())
    text = (repo / ".github" / "workflows" / "matrix.yml").read_text()
    if broken == "needs":
        assert "    needs: expand\n" in text
        text = text.replace("    needs: expand\n", "", 1)
    else:
        assert "fromJSON(needs.expand.outputs.shards)" in text
        text = text.replace("fromJSON(needs.expand.outputs.shards)", "fromJSON(needs.expand.outputs.shard)")
    # without the report job, which would only add a failure of its own (nothing to merge)
    assert text.count("\n  report:\n") == 1 and text.index("\n  report:\n") > text.index("\n  run:\n")
    text = text[: text.index("\n  report:\n") + 1]
    (repo / ".github" / "workflows" / "broken.yml").write_text(text)
    done = act(
        repo,
        ".github/workflows/broken.yml",
        "workflow_dispatch",
        {"inputs": {"matrix": "matrix/act.yaml", "backend": "host", "filter": "*", "repeats": "1"}},
        run_id=31,
    )
    assert done.returncode != 0, log(done)
    # act cannot expand the fan-out job's matrix and runs it once without one: that job fails, the
    # expand job is not to blame
    assert "Error while evaluating matrix" in done.stderr, log(done)
    assert "Error: Job 'run' failed" in done.stderr, log(done)
    assert failed_jobs(done) == {"run"}, log(done)
    assert "[matrix/expand] 🏁  Job succeeded" in done.stdout, log(done)
    assert not list((act.artifacts / "31").rglob("r*.json"))  # no shard ran a cell


def test_every_pinned_action_has_a_stand_in() -> None:
    assert {key.split("@")[0] for key in pinned_actions()} == {
        "actions/checkout",
        "actions/upload-artifact",
        "actions/download-artifact",
    }


def documented_caller() -> dict[str, Any]:
    """The complete caller of gate.yml that docs/ci.md gives."""
    section = (REPO / "docs" / "ci.md").read_text().split("## Gating another repository", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "docs/ci.md gives no caller of gate.yml"
    workflow: dict[Any, Any] = yaml.safe_load(block[1])
    workflow["on"] = workflow.pop(True)  # YAML 1.1 reads the key "on" as True
    return workflow


# The caller's "build": a configuration repository whose build yields settings for the cells.
BUILD = """\
#!/usr/bin/env bash
# Build this repository's configuration; print the settings it gives the database.
set -euo pipefail
echo "gtm.global_buffers: $(cat buffers.txt)"
"""


@pytest.mark.parametrize("head", ["more buffers", "broken build"])
def test_a_caller_repository_gets_a_verdict_from_gate_yml(act: Act, head: str) -> None:
    """A throwaway repository (acme/db) whose workflow calls fsmatrix's gate.yml at a commit on a pull
    request that changes its configuration: each side's runs get its build's settings under the same
    cell id, the gate's inputs for adding pairs reach gate.sh (its looks), and the caller's next job reads
    the verdict (pass or not-decided: A/A-like at 3 pairs may be either). A head whose build fails fails the gate."""
    fsmatrix = throwaway_repository(act.repository())
    ref = git(fsmatrix, "rev-parse", "HEAD")
    caller = act.repository("acme/db")
    (caller / "bench").mkdir()
    (caller / "bench" / "gate.yaml").write_text(TINY_GATE)
    (caller / "build.sh").write_text(BUILD)
    (caller / "build.sh").chmod(0o755)
    (caller / "buffers.txt").write_text("4000\n")
    # docs/ci.md's caller, pointed at the throwaway fsmatrix and this test's matrix, build and runner,
    # with the small gate's settings and without containers (no podman here)
    workflow = documented_caller()
    gate = workflow["jobs"]["gate"]
    assert gate["uses"] == "OWNER/fsmatrix/.github/workflows/gate.yml@COMMIT_SHA"
    gate["uses"] = f"{SLUG}/.github/workflows/gate.yml@{ref}"
    gate["with"].update(
        {
            "fsmatrix-repository": SLUG,
            "fsmatrix-ref": ref,
            "matrix": "bench/gate.yaml",
            "prepare": "./build.sh",
            "runner-labels": '["self-hosted"]',
            "repeats": int(SMALL_GATE["REPEATS"]),
            "confirm-repeats": int(SMALL_GATE["CONFIRM_REPEATS"]),
            "threshold": SMALL_GATE["THRESHOLD"],
            "pairs-step": 1,
            "max-pairs": int(SMALL_GATE["REPEATS"]) + 1,
            "time-budget": 30,
            "not-decided": "neutral",
            "container": False,
        }
    )
    (caller / ".github" / "workflows").mkdir(parents=True)
    (caller / ".github" / "workflows" / "fsmatrix.yml").write_text(yaml.safe_dump(workflow, sort_keys=False))
    git(caller, "init", "-q", "-b", "main")
    base = commit(caller, "base")
    git(caller, "checkout", "-q", "-b", "feature")
    (caller / "buffers.txt").write_text("4100\n" if head == "more buffers" else "")
    if head == "broken build":
        (caller / "build.sh").write_text(BUILD.replace("echo", "test -s buffers.txt\necho"))
    head_sha = commit(caller, head)
    git(caller, "checkout", "-q", "main")
    side = {"repo": {"full_name": "acme/db"}}
    event = {
        "action": "opened",
        "number": 3,
        "pull_request": {"number": 3, "head": {"sha": head_sha, **side}, "base": {"sha": base, **side}},
        "repository": {"full_name": "acme/db"},
    }
    done = act(
        caller,
        ".github/workflows/fsmatrix.yml",
        "pull_request",
        event,
        run_id=41,
        slug="acme/db",
        local={f"{SLUG}@{ref}": fsmatrix},
    )
    results = act.artifact(41, "fsmatrix-gate")
    if head == "broken build":
        # The gate's step sets verdict=fail and fails the job. (act then stops: unlike GitHub, it runs
        # no later job of the caller after a failed called workflow, so the output is read in the log.)
        assert done.returncode != 0 and "Error: Job 'gate' failed" in done.stderr, log(done)
        assert "the prepare command failed in the head checkout" in done.stdout, log(done)
        assert "| verdict: fail" in done.stdout, log(done)
        assert not (results / "base").exists()  # nothing ran
        return
    assert done.returncode == 0, log(done)
    verdict = (results / "verdict.txt").read_text().strip()
    said = {"PASS": "pass", "NOT DECIDED": "not-decided"}[verdict]
    assert f"The fsmatrix gate says {said}" in done.stdout, log(done)
    comparison = (results / "comparison.md").read_text()
    first = int(SMALL_GATE["REPEATS"])
    assert f"looking after {first}, {first + 1} pairs" in comparison, comparison  # pairs-step and max-pairs
    pairs = int((results / "pairs.txt").read_text())
    assert pairs == first + 1 if verdict == "NOT DECIDED" else pairs in (first, first + 1), log(done)
    # not-decided: neutral, the job passed; a NOT DECIDED gate said so in a notice
    assert ("::notice title=fsmatrix gate NOT DECIDED::" in done.stdout) == (verdict == "NOT DECIDED"), log(done)
    ids = {}
    for side_name, buffers in (("base", 4000), ("head", 4100)):
        docs = [json.loads(p.read_text()) for p in (results / side_name).rglob("r*.json")]
        assert len(docs) == pairs and {d["status"] for d in docs} == {"passed"}, log(done)
        assert {d["params"]["gtm"]["global_buffers"] for d in docs} == {buffers}, docs[0]["params"]
        ids[side_name] = {d["cell_id"] for d in docs}
    assert ids["base"] == ids["head"] and len(ids["base"]) == 1
    assert (results / "settings" / "head.yaml").read_text() == "gtm.global_buffers: 4100\n"
    assert ("- gate PASSED: " in comparison) == (verdict == "PASS"), comparison


# The nightly's matrix here: one small 3n+1 cell, 12 runs a night (enough points for Otava on each side).
NIGHTLY = """\
name: nightly-act
axes:
  filesystem: [tmpfs]
defaults:
  workload.threen1: {start: 1, end: 50000, workers: 2, block: 5000, keys: integer}
  storage.disk_size: 1G
repeat: 12
"""


def test_nightly_reports_a_change_point_and_fails_over_its_threshold(act: Act, tmp_path: Path) -> None:
    """nightly.yml against a throwaway PostgreSQL store (the secret FSMATRIX_STORE) that already holds
    an earlier night of the same cell: that night's 12 runs as they were made here, pushed with half
    their elapsed time and another GT.M version recorded. Tonight's runs are slower by about 2×: the
    summary names the change point and what changed; the job passes at a threshold of 1000 % and fails
    at 10 %."""
    if not available():
        pytest.skip("PostgreSQL 15's initdb (make deps) and runuser are needed")
    repo = throwaway_repository(act.repository())
    (repo / "matrix" / "nightly-act.yaml").write_text(NIGHTLY)
    commit(repo, "the nightly's matrix")
    earlier = tmp_path / "earlier"
    done = subprocess.run(
        [sys.executable, "-m", "fsmatrix", "run", str(repo / "matrix" / "nightly-act.yaml"), "--backend", "host",
         "--run-id", "earlier", "--results", str(earlier), "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for path in (earlier / "earlier").rglob("r*.json"):
        doc = json.loads(path.read_text())
        doc["metrics"]["elapsed_s"] /= 2
        doc["provenance"].setdefault("tools", {})["gtm"] = "GT.M V6.3-014 Linux x86_64"
        path.write_text(json.dumps(doc))
    with cluster("unused-password-of-the-pusher-role") as server:
        server.create_database("nightly")
        url = server.url("nightly")
        pushed = subprocess.run(
            [sys.executable, "-m", "fsmatrix", "results", "push", str(earlier / "earlier"), "--store", url],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert pushed.returncode == 0 and "12 new" in pushed.stdout, pushed.stderr
        inputs = {"matrix": "matrix/nightly-act.yaml", "backend": "host", "days": "30"}
        for run_id, threshold in ((41, "1000%"), (42, "10%")):
            night = act(
                repo,
                ".github/workflows/nightly.yml",
                "workflow_dispatch",
                {"inputs": {**inputs, "threshold": threshold}},
                run_id=run_id,
                secrets={"FSMATRIX_STORE": url},
            )
            summary = (act.artifact(run_id, "trends") / "history.md").read_text()
            # the change to tonight's build, named; the noise between two nights here may add one unnamed
            assert re.search(r"\d+ change points \(1 attributed", summary), summary + log(night)
            assert "tools.gtm GT.M V6.3-014 Linux x86_64 → " in summary, summary
            if threshold == "1000%":
                assert night.returncode == 0, log(night)
            else:
                assert night.returncode != 0 and failed_jobs(night) == {"nightly"}, log(night)
            assert (act.artifact(run_id, "trends") / "trends" / "index.html").exists()


def test_the_gh_stand_in_refuses_what_github_refuses(tmp_path: Path) -> None:
    """gh.py's check run API: a check run GitHub would take is stored; one it would refuse (a missing
    name, an unknown conclusion, a completed one without a conclusion, no token) fails as gh does."""
    env = {**os.environ, "FSMATRIX_ACT_GH_LOG": str(tmp_path / "log"), "FSMATRIX_ACT_CHECKS": str(tmp_path / "checks")}
    good = ["name=fsmatrix/pr-verdict", "head_sha=abc", "status=completed", "conclusion=neutral"]
    good += ["output[title]=NOT DECIDED: t", "output[summary]=NOT DECIDED: s"]

    def gh(fields: list[str], token: str = "t") -> subprocess.CompletedProcess[str]:
        args = [sys.executable, str(ACT / "gh.py"), "api", "repos/acme/x/check-runs"]
        args += [arg for field in fields for arg in ("-f", field)]
        return subprocess.run(args, env={**env, "GH_TOKEN": token}, capture_output=True, text=True, check=False)

    assert gh(good).returncode == 0
    stored = json.loads((tmp_path / "checks" / "acme" / "x" / "abc" / "fsmatrix_pr-verdict.json").read_text())
    assert stored["conclusion"] == "neutral" and stored["output"]["summary"] == "NOT DECIDED: s"
    for planted, why in (
        (good[1:], "name is missing"),
        ([*good[:3], "conclusion=undecided"], "conclusion 'undecided' is not one of"),
        (good[:3], "conclusion is required when status is completed"),
        (good[:5], "output needs a title and a summary"),
    ):
        refused = gh(planted)
        assert refused.returncode == 1 and why in refused.stderr, (planted, refused.stderr)
    assert gh(good, token="").returncode == 4
