"""One bisect on disk: its inputs checked against a resumed one's, the real lab, and its outputs
(``bisect.md``, ``bisect.json``) in the results directory next to every run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from fsmatrix.agent import jsonfile
from fsmatrix.backends import Backend
from fsmatrix.bisect import driver
from fsmatrix.bisect.lab import GitLab, LabSetup
from fsmatrix.errors import UserError

INPUTS_FILE = "bisect-inputs.json"
REPORT_JSON = "bisect.json"
REPORT_MD = "bisect.md"


def run(
    setup: LabSetup,
    commits: list[driver.Commit],
    backend: Backend,
    plan: driver.Plan,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """The bisect of ``commits`` (good first) on ``setup.base`` with ``backend``; its report, also
    written as ``bisect.md`` and ``bisect.json`` under ``setup.results_root``. The same inputs again
    resume it; other inputs in the same results directory are refused (UserError). Clones go on
    every exit path."""
    results_root = setup.results_root
    inputs = {
        "repo": str(setup.repo.resolve()),
        "good": commits[0].sha,
        "bad": commits[-1].sha,
        "matrix": str(setup.matrix_file.resolve()),
        "cell": setup.base.id,
        "prepare": setup.prepare,
        "settings_file": setup.settings_file,
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
    lab = GitLab(setup, backend)
    try:
        report = driver.Bisector(commits, lab, plan, cell=setup.base.id, say=say).run()
    finally:
        lab.close()
    report["results"] = str(results_root.resolve())
    report["reused_runs"] = lab.reused
    text = driver.markdown(report) + f"- results: {results_root.resolve()}\n"
    report["markdown"] = text
    (results_root / REPORT_MD).write_text(text, encoding="utf-8")
    jsonfile.write_atomic(results_root / REPORT_JSON, jsonfile.strict(report))
    return report
