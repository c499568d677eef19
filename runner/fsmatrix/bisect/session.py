"""One bisect on disk: its inputs checked against a resumed one's, the real lab, and its outputs
(``bisect.md``, ``bisect.json``) in the results directory next to every run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fsmatrix.agent import jsonfile
from fsmatrix.backends import Backend
from fsmatrix.bisect import driver
from fsmatrix.bisect.lab import GitLab
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell

INPUTS_FILE = "bisect-inputs.json"
REPORT_JSON = "bisect.json"
REPORT_MD = "bisect.md"


def run(
    repo: Path,
    commits: list[driver.Commit],
    base: MatrixCell,
    backend: Backend,
    plan: driver.Plan,
    *,
    matrix_file: Path,
    results_root: Path,
    workdir: Path,
    prepare: str | None,
    settings_file: str | None,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """The bisect of ``commits`` (good first) on ``base`` with ``backend``; its report, also written as
    ``bisect.md`` and ``bisect.json`` under ``results_root``. The same inputs again resume it; other
    inputs in the same results directory are refused (UserError). Clones go on every exit path."""
    inputs = {
        "repo": str(repo.resolve()),
        "good": commits[0].sha,
        "bad": commits[-1].sha,
        "matrix": str(matrix_file.resolve()),
        "cell": base.id,
        "prepare": prepare,
        "settings_file": settings_file,
        "backend": backend.name,
        "plan": dataclasses.asdict(plan),
    }
    stored = results_root / INPUTS_FILE
    if stored.is_file() and jsonfile.read(stored) != inputs:
        raise UserError(
            f"--results {results_root} holds another bisect ({stored} differs from these options): "
            "give another --results to start a new one, or the same options to resume it"
        )
    jsonfile.write_atomic(stored, inputs)
    lab = GitLab(
        repo,
        base,
        backend,
        results_root=results_root,
        workdir=workdir,
        prepare=prepare,
        settings_file=settings_file,
        matrix_path=str(matrix_file),
    )
    try:
        report = driver.Bisector(commits, lab, plan, cell=base.id, say=say).run()
    finally:
        lab.close()
    report["results"] = str(results_root.resolve())
    report["reused_runs"] = lab.reused
    text = driver.markdown(report) + f"- results: {results_root.resolve()}\n"
    report["markdown"] = text
    (results_root / REPORT_MD).write_text(text, encoding="utf-8")
    jsonfile.write_atomic(results_root / REPORT_JSON, jsonfile.strict(report))
    return report
