"""The real Lab: each commit checked out in a temporary clone of its own, prepared, and its cell run.

**Prepare.** In the commit's clone, ``--prepare CMD`` runs (``bash -c``, the clone as its working
directory, ``FSMATRIX_BISECT_COMMIT`` and ``FSMATRIX_BISECT_CLONE`` in its environment) and prints
the settings to apply to the cell as YAML (``vm.kernel: /path/x.deb``, ``postgres.shared_buffers:
256MB``, any dotted setting a matrix accepts; nothing printed: none). Without ``--prepare``, the
commit's own ``--settings-file`` holds them. Its stderr goes to ``<results>/prepared/<sha>.log``; a
command that fails, prints something that is not a mapping, or settings the cell refuses, makes the
commit a skip (at an end: one line and exit 2). What a commit prepared is kept in
``<results>/prepared/<sha>.json``: a resumed bisect prepares a commit again only when one of its runs
is still to be made.

**The cell.** The cell of ``--matrix`` that ``--only`` names, with the commit's settings laid over
it, checked as a matrix cell. Its runs keep the *named cell's id* on purpose: settings change a
cell's id and ``compare`` matches cells by id, so a commit's runs and the ends' are compared as the
same cell (as ``bench.gate`` relabels its variant); the id the settings give, the commit, its
subject and settings are in every run's ``provenance.bisect``.

**Clones** live under ``<workdir>/bisect/<hash of the results directory>/<sha12>`` (the same path
when resumed, so a prepared path such as a built kernel's is the same too), from the commit's
preparation to the end of its runs; ``close`` removes them all, on every exit path.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fsmatrix import matrix, runs
from fsmatrix.agent import jsonfile
from fsmatrix.backends import Backend
from fsmatrix.bisect import git
from fsmatrix.bisect.driver import Commit, PreparedCommit
from fsmatrix.errors import UserError
from fsmatrix.matrix import Matrix, MatrixCell
from fsmatrix.results import store


def one_cell(matrix_file: Path, only: str) -> matrix.MatrixCell:
    """The one cell of ``matrix_file`` that the glob ``only`` names; UserError for none or several."""
    m = matrix.load(matrix_file)
    chosen = [c for c in m.cells if fnmatch.fnmatchcase(c.id, only)]
    if len(chosen) != 1:
        shown = chosen or m.cells
        ids = ", ".join(c.id for c in shown[:6]) + (", ..." if len(shown) > 6 else "")
        raise UserError(
            f"--only {only!r} matches {len(chosen)} cells of {matrix_file}; bisect follows exactly one "
            f"({'matching' if chosen else 'its cells'}: {ids})"
        )
    return chosen[0]


def with_settings(base: MatrixCell, settings: dict[str, Any], source: str) -> MatrixCell:
    """``base`` with ``settings`` (dotted or nested) laid over it, checked as a matrix cell (UserError
    naming ``source`` otherwise); its id stays ``base``'s (see the module's docstring)."""
    if not settings:
        return base
    flat = {**matrix.flatten(base.params), **matrix.flatten(settings)}
    cell = matrix.expand_document({"name": "bisect", "include": [flat]}, source).cells[0]
    return MatrixCell(base.id, cell.spec)


def settings_id(cell: MatrixCell) -> str:
    """The id the cell's settings give it (what ``fsmatrix matrix expand`` would print)."""
    return matrix.cell_id(cell.spec)


class _CommitBackend:
    """The run's backend, with the commit named in every result's provenance."""

    def __init__(self, inner: Backend, info: dict[str, Any]) -> None:
        self.inner, self.info, self.name = inner, info, inner.name

    def preflight(self, cells: list[MatrixCell]) -> None:
        self.inner.preflight(cells)

    def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
        doc = self.inner.run(cell, repeat)
        doc.setdefault("provenance", {})["bisect"] = self.info
        return doc

    def environment(self) -> dict[str, Any]:
        return {**self.inner.environment(), "bisect": self.info}

    def close(self) -> None:
        """The lab's owner closes the real backend once."""


def clones_root(workdir: Path, results_root: Path) -> Path:
    """Where one bisect's clones live: a directory of its own per results directory."""
    key = hashlib.sha256(str(results_root.resolve()).encode()).hexdigest()[:12]
    return workdir / "bisect" / key


@dataclass(frozen=True, kw_only=True)
class LabSetup:
    """What a bisect's lab builds and runs: the repository, the cell (``base``, from ``matrix_file``),
    how a commit gives its settings (``prepare``: the --prepare command; else ``settings_file``), and
    where its results (``results_root``) and clones (under ``workdir``) go."""

    repo: Path
    base: MatrixCell
    matrix_file: Path
    prepare: str | None
    settings_file: str | None
    results_root: Path
    workdir: Path


class GitLab:
    def __init__(self, setup: LabSetup, backend: Backend) -> None:
        self.repo, self.base, self.backend = setup.repo.resolve(), setup.base, backend
        self.results_root = setup.results_root
        self.prepare_cmd, self.settings_file = setup.prepare, setup.settings_file
        self.matrix = Matrix(name="bisect", path=str(setup.matrix_file), repeat=1)
        self.clones = clones_root(setup.workdir, setup.results_root)
        shutil.rmtree(self.clones, ignore_errors=True)  # what a killed bisect left
        self.live: dict[str, MatrixCell] = {}  # prepared and cloned now: sha -> the cell with its settings
        self.reused = 0

    # --------------------------------------------------------------------------- preparing

    def _cache(self, sha: str) -> Path:
        return self.results_root / "prepared" / f"{sha}.json"

    def prepare(self, commit: Commit) -> PreparedCommit:
        cached = self._cache(commit.sha)
        if cached.is_file():
            stored = jsonfile.read(cached)
            return PreparedCommit(commit, stored.get("settings") or {}, stored.get("failure"))
        return self._build(commit)

    def _build(self, commit: Commit) -> PreparedCommit:
        clone = self.clones / commit.short
        log = self._cache(commit.sha).with_suffix(".log")
        log.parent.mkdir(parents=True, exist_ok=True)
        settings: dict[str, Any] = {}
        failure: str | None = None
        try:
            git.clone(self.repo, commit.sha, clone)
            text = self._settings_text(commit, clone, log)
            loaded = yaml.safe_load(text) if text.strip() else {}
            if not isinstance(loaded, dict):
                raise UserError(f"printed {text.strip()[:60]!r}, not a mapping of settings (KEY: VALUE lines)")
            self.live[commit.sha] = with_settings(self.base, loaded, f"the settings of {commit.short}")
            settings = loaded  # checked: what a cell accepts is JSON
        except (UserError, OSError, yaml.YAMLError) as exc:
            failure = " ".join(str(exc).split())
            shutil.rmtree(clone, ignore_errors=True)
        jsonfile.write_atomic(
            self._cache(commit.sha),
            {"sha": commit.sha, "subject": commit.subject, "settings": settings, "failure": failure},
        )
        return PreparedCommit(commit, settings, failure)

    def _settings_text(self, commit: Commit, clone: Path, log: Path) -> str:
        if self.prepare_cmd is None:
            assert self.settings_file is not None
            path = clone / self.settings_file
            if not path.is_file():
                raise UserError(f"--settings-file {self.settings_file}: not in commit {commit.short}")
            return path.read_text(encoding="utf-8")
        env = {"FSMATRIX_BISECT_COMMIT": commit.sha, "FSMATRIX_BISECT_CLONE": str(clone)}
        with log.open("w", encoding="utf-8") as err:
            done = subprocess.run(
                ["bash", "-c", self.prepare_cmd],
                cwd=clone,
                env={**os.environ, **env},
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                check=False,
            )
        if done.returncode != 0:
            lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
            last = lines[-1].strip() if lines else "nothing on stderr"
            raise UserError(f"--prepare exited with status {done.returncode} ({last}; the log: {log})")
        return done.stdout

    # --------------------------------------------------------------------------- running

    def run(self, prepared: PreparedCommit, run_id: str, repeat: int) -> store.Result:
        path = store.result_path(self.results_root / run_id, self.base.id, repeat)
        if path.is_file():
            self.reused += 1
            return store.load_document(path)  # any status: the same decisions as before
        commit = prepared.commit
        if commit.sha not in self.live:  # resumed: prepared before, its clone gone
            again = self._build(commit)
            if again.failure:
                raise UserError(f"commit {commit.short} prepared before but not now: {again.failure}")
        cell = self.live[commit.sha]
        info = {
            "commit": commit.sha,
            "subject": commit.subject,
            "repo": str(self.repo),
            "settings": prepared.settings,
            "settings_cell_id": settings_id(cell),
            "run_id": run_id,
        }
        return runs.run_repeat(
            self.matrix,
            cell,
            _CommitBackend(self.backend, info),
            results_root=self.results_root,
            run_id=run_id,
            repeat=repeat,
        )

    def release(self, commit: Commit) -> None:
        if self.live.pop(commit.sha, None) is not None:
            shutil.rmtree(self.clones / commit.short, ignore_errors=True)

    def close(self) -> None:
        """Every clone gone (success, failure, Ctrl-C)."""
        self.live.clear()
        shutil.rmtree(self.clones, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.clones.parent.rmdir()  # <workdir>/bisect, when no other bisect uses it
