"""run-shard.sh, one fan-out job of matrix.yml: the command it runs for its shard, with the shard's
design record (DESIGN, from `matrix expand --format github`) handed to `fsmatrix run --design-from`.
The `fsmatrix` here is a stand-in that records its arguments and the design file it was given (the
workflow on real runs: tests/ci/test_act.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

STAND_IN = """#!/bin/sh
printf '%s\\n' "$@" > args
for a in "$@"; do
  if [ "$previous" = --design-from ]; then cp "$a" design-given.json; fi
  previous=$a
done
"""


def run_shard(tmp_path: Path, design: str | None) -> list[str]:
    fsmatrix = tmp_path / ".venv" / "bin" / "fsmatrix"
    fsmatrix.parent.mkdir(parents=True)
    fsmatrix.write_text(STAND_IN)
    fsmatrix.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "DESIGN"} | {"FSMATRIX_IN_CONTAINER": "0"}
    if design is not None:
        env["DESIGN"] = design
    script = REPO / ".github" / "scripts" / "run-shard.sh"
    done = subprocess.run(
        ["bash", str(script), "matrix/m.yaml", "host", "a,b", "results", "2"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return (tmp_path / "args").read_text().splitlines()


@pytest.mark.skipif(os.geteuid() != 0, reason="run-shard.sh becomes root with sudo first")
def test_the_shard_runs_its_cells_with_the_design_it_was_given(tmp_path: Path) -> None:
    record = {"kind": "fractional", "factors": ["x", "y", "z"], "words": [1, 2, 3]}
    args = run_shard(tmp_path, json.dumps(record))
    assert args[:2] == ["run", "matrix/m.yaml"] and args[args.index("--only") + 1] == "a,b"
    assert args[args.index("--repeat") + 1] == "2" and "--no-race" in args
    assert json.loads((tmp_path / "design-given.json").read_text()) == record
    # a cross's shards (no DESIGN) build nothing: no --design-from
    plain = tmp_path / "plain"
    plain.mkdir()
    assert "--design-from" not in run_shard(plain, None) and "--design-from" not in run_shard(plain / "x", "")
