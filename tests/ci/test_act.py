"""The workflows themselves, run by nektos/act on this machine: the job graph, the expressions, the
`if:` conditions and the artefact names, not only the scripts (tests/ci/test_workflows.py replays those).

act runs each job directly on this host (`-P LABEL=-self-hosted`), in a throwaway repository: a copy of
this checkout committed to a git "server" (a directory: GITHUB_SERVER_URL=file://...). GitHub's own
actions cannot be fetched offline; small stand-ins under tests/ci/act/actions take their place
(`--local-repository`, keyed by the refs the workflows pin): checkout clones from that server,
upload- and download-artifact keep artefacts in a directory. `gh` is a stub that records what it was
asked. Everything runs on the host backend with tiny matrices: the steps really run (act's `-n` is
not a dry run on the host), as root, on loop devices.
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
    the workflows' own commands."""
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:12]
    where = Path(os.environ.get("FSMATRIX_CACHE", "/var/cache/fsmatrix")) / "act" / f"wheelhouse-{digest}"
    if not (where / ".complete").exists():
        building = where.with_name(where.name + ".tmp")
        shutil.rmtree(building, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(building), f"{REPO}[dev]", "setuptools>=61"],
            check=True,
            timeout=1800,
        )
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


def throwaway_repository(where: Path) -> Path:
    """This checkout's files (as they are in the working tree) committed to a fresh repository, with
    the test's tiny matrices and the gate's small settings (test_workflows.SMALL_GATE)."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        if name and (REPO / name).is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, where / name)
    (where / "matrix" / "act.yaml").write_text(SMALL)
    (where / "matrix" / "pr.yaml").write_text(TINY_GATE)
    # the verdict judges at the gate's threshold (a verdict at another one would judge another gate)
    # (the gate's backend is a repository variable, not a literal: the gate's runs pass it with --var)
    literals = [key for key in SMALL_GATE if key != GATE_BACKEND]
    for name, keys in (("pr-gate.yml", literals), ("pr-verdict.yml", ["THRESHOLD"])):
        workflow = where / ".github" / "workflows" / name
        text = workflow.read_text()
        for key in keys:
            setting = re.compile(rf'^  {key}: "[^"]*"$', re.M)
            assert setting.search(text), f"{name} sets no {key}"
            text = setting.sub(f'  {key}: "{SMALL_GATE[key]}"', text)
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
        gh.write_text(f'#!/bin/sh\n# gh, recording its arguments\nprintf "%s\\n" "$@" -- >> {self.root / "gh.log"}\n')
        gh.chmod(0o755)
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
        for key, value in (secrets or {}).items():
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


def synthetic_pr(act: Act, head: str) -> tuple[Path, dict[str, Any]]:
    """The throwaway repository with a pull request from branch `feature` to `main`: ``head`` is
    "unchanged" (a documentation edit) or "regressed" (every 3n+1 number costs several times the work:
    a real slowdown of the code under test). Returns the repository and the pull_request event."""
    repo = throwaway_repository(act.repository())
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    if head == "regressed":
        slow = _regressed_runner(act.root / "slow") / "fsmatrix" / "agent" / "workloads" / "threen1" / "threen1.m"
        shutil.copy2(slow, repo / "runner" / "fsmatrix" / "agent" / "workloads" / "threen1" / "threen1.m")
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


@pytest.mark.parametrize("head", ["unchanged", "regressed"])
def test_pr_gate_and_verdict_workflows_on_a_synthetic_pull_request(act: Act, head: str) -> None:
    repo, event = synthetic_pr(act, head)
    gate = act(
        repo,
        ".github/workflows/pr-gate.yml",
        "pull_request",
        event,
        variables={"FSMATRIX_IN_CONTAINER": "0", GATE_BACKEND: SMALL_GATE[GATE_BACKEND]},
        run_id=21,
    )
    results = act.artifact(21, "pr-gate-results")
    for side in ("base", "head"):
        docs = [json.loads(p.read_text()) for p in (results / side).rglob("r*.json")]
        assert len(docs) == int(SMALL_GATE["REPEATS"]) and {d["status"] for d in docs} == {"passed"}, log(gate)
    if head == "unchanged":
        assert gate.returncode == 0, log(gate)
        assert not (results / "head-confirm").exists()
    else:
        assert gate.returncode != 0 and failed_jobs(gate) == {"gate"}, log(gate)
        assert "CONFIRMED regression" in (results / "comparison.md").read_text()

    # pr-verdict, as workflow_run would start it when pr-gate completes (act does not chain them)
    run = {"id": 21, "event": "pull_request", "head_sha": event["pull_request"]["head"]["sha"]}
    verdict = act(
        repo,
        ".github/workflows/pr-verdict.yml",
        "workflow_run",
        {"action": "completed", "workflow_run": run, "repository": {"full_name": SLUG}},
        run_id=22,
    )
    assert (verdict.returncode == 0) == (head == "unchanged"), log(verdict)
    [status] = [call for call in act.gh_calls if call[0] == "api"]  # act itself asks `gh auth token`
    assert status[:2] == ["api", f"repos/{SLUG}/statuses/{run['head_sha']}"], status
    fields = dict(arg.split("=", 1) for arg in status[2:] if "=" in arg)
    assert fields["state"] == ("success" if head == "unchanged" else "failure"), status
    assert fields["context"] == "fsmatrix/pr-verdict"
    expected = "passed: nothing" if head == "unchanged" else "failed:"
    assert (
        fields["description"] == f"{expected} significantly worse with an estimate above {SMALL_GATE['THRESHOLD']}"
    ), status


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
    cell id, and the caller's next job reads the verdict. A head whose build fails fails the gate."""
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
    assert "The fsmatrix gate says pass" in done.stdout, log(done)
    ids = {}
    for side_name, buffers in (("base", 4000), ("head", 4100)):
        docs = [json.loads(p.read_text()) for p in (results / side_name).rglob("r*.json")]
        assert len(docs) == int(SMALL_GATE["REPEATS"]) and {d["status"] for d in docs} == {"passed"}, log(done)
        assert {d["params"]["gtm"]["global_buffers"] for d in docs} == {buffers}, docs[0]["params"]
        ids[side_name] = {d["cell_id"] for d in docs}
    assert ids["base"] == ids["head"] and len(ids["base"]) == 1
    assert (results / "settings" / "head.yaml").read_text() == "gtm.global_buffers: 4100\n"
    assert "gate passed: nothing significantly worse" in (results / "comparison.md").read_text()


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
