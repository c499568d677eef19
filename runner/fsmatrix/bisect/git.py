"""The range to bisect, read from the user's repository, and a clone of one commit of it.

Nothing here writes into the user's repository: revisions are read with ``git rev-parse`` and
``git rev-list``, and each tested commit is checked out in a clone of its own (``git clone
--shared``: the clone borrows the repository's objects through ``objects/info/alternates``, so it
costs no copy; the repository must not be garbage-collected while the bisect runs).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from fsmatrix.bisect.driver import Commit
from fsmatrix.errors import UserError


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False, timeout=120)


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def _rev(repo: Path, rev: str, option: str) -> str:
    done = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise UserError(f"{option} {rev}: no such commit in {repo}")
    return done.stdout.strip()


def commits(repo: Path, good: str, bad: str) -> list[Commit]:
    """The commits from ``good`` to ``bad`` along bad's first-parent line, both ends included (good
    first). UserError (one line, nothing checked out) for a repository that is not one, has local
    changes, a revision that does not exist, good == bad, or good not an ancestor of bad."""
    top = git(repo, "rev-parse", "--show-toplevel")
    if not repo.is_dir() or top.returncode != 0:
        raise UserError(f"--repo {repo}: not a git repository ({_one_line(top.stderr)})")
    dirty = git(repo, "status", "--porcelain", "--untracked-files=no")
    if dirty.returncode != 0:
        raise UserError(f"--repo {repo}: git status failed ({_one_line(dirty.stderr)})")
    changed = dirty.stdout.splitlines()
    if changed:
        raise UserError(
            f"--repo {repo} has uncommitted changes ({len(changed)} paths, e.g. {changed[0][3:]}): "
            "bisect tests commits, not the working tree; commit or stash them first"
        )
    good_sha, bad_sha = _rev(repo, good, "--good"), _rev(repo, bad, "--bad")
    if good_sha == bad_sha:
        raise UserError(f"--good {good} and --bad {bad} are the same commit {good_sha[:12]}: there is no range")
    if git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha).returncode != 0:
        raise UserError(
            f"--good {good} ({good_sha[:12]}) is not an ancestor of --bad {bad} ({bad_sha[:12]}): "
            "the good commit must come before the bad one in the history"
        )
    listed = git(repo, "rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}")
    shas = listed.stdout.split()
    parent = git(repo, "rev-parse", f"{shas[0]}^1").stdout.strip() if shas else ""
    if listed.returncode != 0 or parent != good_sha:
        raise UserError(
            f"--good {good} ({good_sha[:12]}) is not on the first-parent line of --bad {bad} (it came in "
            "through a merge): give a good commit on that line, e.g. the merge's first parent"
        )
    shown = git(repo, "log", "--first-parent", "--format=%H %s", f"{good_sha}..{bad_sha}").stdout.splitlines()
    shown += git(repo, "log", "-1", "--format=%H %s", good_sha).stdout.splitlines()
    subjects = {sha: subject for sha, _, subject in (line.partition(" ") for line in shown)}
    return [Commit(sha, subjects.get(sha, ""), i) for i, sha in enumerate([good_sha, *shas])]


def clone(repo: Path, sha: str, dest: Path) -> None:
    """``sha`` checked out (detached) in a new clone at ``dest`` that shares ``repo``'s objects."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["git", "clone", "--quiet", "--shared", "--no-checkout", str(repo), str(dest)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode == 0:
        done = git(dest, "checkout", "--quiet", "--detach", sha)
    if done.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        raise OSError(f"git clone of {sha[:12]} failed: {_one_line(done.stderr)}")
