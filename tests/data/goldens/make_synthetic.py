"""Write the synthetic result documents of the golden cases that no real run makes here, from the
same helpers the unit tests build them with (run once; the documents are committed):

- ``seedreport/run/``: tests/results/test_seedreport.py's ``small_000`` fixture with its ``SEPARATED``
  values (matrix/seeds/gtm-3n1-filesystems.yaml at scale small, the claims that hold): the report's
  "Against the published results" section. Its matrix.json names the matrix file relative to the
  repository, so the golden test runs from the repository's root.
- ``upgrade/upgrade/``: tests/results/test_environment_axis.py's ``_upgrade_docs()`` and its
  matrix.json (the image as an environment axis, side by side in the report).
- ``across/on12``, ``across/on13``: that test's ``compare --across image`` sides.

Usage, from the repository's root: ``.venv/bin/python tests/data/goldens/make_synthetic.py``
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "results")]

from fsmatrix import matrix  # noqa: E402
from fsmatrix.results import SCHEMA_VERSION  # noqa: E402
from test_compare import samples  # noqa: E402
from test_environment_axis import _docs, _upgrade_docs  # noqa: E402
from test_seedreport import SEPARATED, docs_for  # noqa: E402

SEED_MATRIX = Path("matrix/seeds/gtm-3n1-filesystems.yaml")  # relative: the report reads it from the cwd


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def write_run(run_dir: Path, run_id: str, docs: list[dict[str, Any]], matrix_json: dict[str, Any] | None) -> None:
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    if matrix_json is not None:
        write_json(run_dir / "matrix.json", matrix_json)
    for doc in docs:
        doc = {k: v for k, v in doc.items() if k != "_path"}
        doc.setdefault("schema_version", SCHEMA_VERSION)
        doc["run_id"] = run_id
        write_json(run_dir / doc["cell_id"] / f"r{doc['repeat']}.json", doc)


def main() -> None:
    seed_dir = HERE / "seedreport" / "run"
    cells = matrix.load(REPO / SEED_MATRIX, "small").cells
    docs = docs_for(seed_dir, cells, SEPARATED, "elapsed_s")
    write_run(seed_dir, "run", docs, {"name": "x", "file": str(SEED_MATRIX), "cells": []})

    upgrade = _upgrade_docs()
    ids = list(dict.fromkeys(d["cell_id"] for d in upgrade))
    matrix_json = {"baseline_rule": "defaults", "cells": [{"id": i, "baseline": "debian13" not in i} for i in ids]}
    matrix_json["cells"][2]["baseline"] = False  # xfs on Debian 12: one baseline per group (as the test)
    write_run(HERE / "upgrade" / "upgrade", "upgrade", upgrade, matrix_json)

    write_run(HERE / "across" / "on12", "on12", _docs("debian12", "ext4", samples(10.0, seed=1)), None)
    write_run(HERE / "across" / "on13", "on13", _docs("debian13", "ext4", samples(12.0, seed=2)), None)


if __name__ == "__main__":
    main()
