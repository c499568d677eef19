"""The seed experiments as matrix files (matrix/seeds/*.yaml): each expands at the seed's scale and
at its small one, cites its seed, and names published tables that exist and that its cells fill;
and the `scales:` / `reproduces:` mechanism refuses bad input with one clear line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REPO
from fsmatrix import matrix
from fsmatrix.agent import workloads
from fsmatrix.cli import main
from fsmatrix.errors import UserError
from fsmatrix.results.store import Result, published
from fsmatrix.results.verdict import claims

SEED_MATRICES = sorted((REPO / "matrix" / "seeds").glob("*.yaml"))


def test_every_seed_has_its_matrix_files() -> None:
    names = {p.name for p in SEED_MATRICES}
    assert names >= {
        "gtm-3n1-filesystems.yaml",
        "gtm-3n1-ssd.yaml",
        "gtm-3n1-sync-io.yaml",
        "fio-ext2-ext3.yaml",
        "gtm-3n1-tuning.yaml",
        "sysbench-fileio.yaml",
        "pgbench-raw-facts.yaml",
    }


def fake_docs(cells: list[matrix.MatrixCell], run_dir: Path) -> list[Result]:
    """One passed run per cell with every metric of its workload set to 1."""
    docs = []
    for c in cells:
        metrics = {m.name: 1.0 for m in workloads.get(c.workload_kind).metrics}
        doc = {
            "cell_id": c.id,
            "repeat": 1,
            "status": "passed",
            "workload": c.workload_kind,
            "params": c.params,
            "metrics": metrics,
        }
        docs.append(Result.read(doc, run_dir / c.id / "r1.json"))
    return docs


@pytest.mark.parametrize("path", SEED_MATRICES, ids=lambda p: p.name)
def test_seed_matrix_expands_at_both_scales_and_fills_its_tables(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert re.match(r"# Seed 00[0-4] ", text), "the file's first comment cites its seed"
    seed = text[7:10]
    data = published.load()
    full = matrix.load(path)
    small = matrix.load(path, "small")
    assert full.cells and small.cells
    assert small.name == f"{full.name}-small"
    assert small.repeat >= 3
    assert full.reproduces, "each seed matrix names the published tables it reproduces"
    for entry in full.reproduces + small.reproduces:
        assert entry["table"] in data.tables
        assert entry["table"].startswith(seed + "/")
        assert entry["table"].split("/")[1] in text or entry["table"] in text
    # At each scale, every table it reproduces gets at least two entries from its cells.
    for m in (full, small):
        docs = fake_docs(m.cells, Path("/nonexistent"))
        for entry in m.reproduces:
            tv = claims.view(data.tables[entry["table"]], entry["stand_in"], docs)
            filled = [k for k, v in tv.samples.items() if v]
            assert len(filled) >= 2, f"{m.name}: {entry['table']} gets {filled}"
            assert not tv.notes, tv.notes
            published_cells = set(data.tables[entry["table"]].values)
            assert published_cells & set(filled), f"{m.name}: {entry['table']} has no cell beside a published value"


def test_expand_cli_takes_a_scale() -> None:
    path = next(p for p in SEED_MATRICES if p.name == "gtm-3n1-filesystems.yaml")
    result = CliRunner().invoke(main, ["matrix", "expand", str(path), "--scale", "small"])
    assert result.exit_code == 0, result.output
    # Its six filesystems are one comparison group: raced by default, every cell at least its repeat (3).
    assert "gtm-3n1-filesystems-small: 6 cells × a race of 3 to 10 repeats" in result.output
    bad = CliRunner().invoke(main, ["matrix", "expand", str(path), "--scale", "tiny"])
    assert bad.exit_code == 2
    assert "unknown scale 'tiny'; this file has: small" in bad.output
    assert "Traceback" not in bad.output


def test_run_cli_refuses_an_unknown_scale_before_running(tmp_path: Path) -> None:
    path = next(p for p in SEED_MATRICES if p.name == "gtm-3n1-filesystems.yaml")
    result = CliRunner().invoke(main, ["run", str(path), "--scale", "huge", "--results", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert "unknown scale 'huge'" in result.output
    assert not (tmp_path / "r").exists()


BASE = """\
name: t
axes:
  filesystem: [ext2, ext4]
defaults:
  workload.threen1: {start: 1, end: 1000, workers: 2, block: 500}
  gtm: {block_size: 4096, global_buffers: 65536, journal: before}
"""


def load_text(tmp_path: Path, text: str, scale: str | None = None) -> matrix.Matrix:
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    return matrix.load(path, scale)


def test_a_scale_layers_its_defaults_and_replaces_the_rest(tmp_path: Path) -> None:
    text = (
        BASE
        + "scales:\n  small:\n    axes: {filesystem: [xfs]}\n    defaults: {gtm.global_buffers: 1000}\n    repeat: 4\n"
    )
    own = load_text(tmp_path, text)
    small = load_text(tmp_path, text, "small")
    assert [c.params["filesystem"] for c in own.cells] == ["ext2", "ext4"] and own.repeat == 1
    assert [c.params["filesystem"] for c in small.cells] == ["xfs"] and small.repeat == 4
    gtm = small.cells[0].params["gtm"]
    assert gtm["global_buffers"] == 1000  # the scale's
    assert gtm["block_size"] == 4096 and gtm["journal"] == "before"  # the file's, kept
    assert small.name == "t-small" and small.scale == "small" and own.scale is None


@pytest.mark.parametrize(
    ("extra", "scale", "message"),
    [
        ("", "small", "m.yaml:1: --scale small: this file has no 'scales'; run it without --scale"),
        ("scales:\n  small: {repeat: 3}\n", "big", "m.yaml:7: unknown scale 'big'; this file has: small"),
        ("scales:\n  small: {name: other}\n", "small", "scale 'small': unknown key 'name'"),
        ("scales:\n  small: [1]\n", "small", "scale 'small' must be a mapping"),
        ("scales:\n  small: {defaults: [1]}\n", "small", "'defaults' must be a mapping"),
        ("scales: [small]\n", None, "'scales' must be a mapping"),
        ("scales:\n  small: {defaults: {gtm.global_buffers: 0}}\n", "small", "gtm.global_buffers: 0 is not allowed"),
        ("reproduces: 000/elapsed\n", None, "'reproduces' must be a list"),
        ("reproduces:\n  - table: elapsed\n", None, "table 'elapsed' is not SEED/TABLE"),
        ("reproduces:\n  - {table: 000/elapsed, rows: 1}\n", None, "unknown keys rows"),
        ("reproduces:\n  - {table: 000/elapsed, stand_in: {a: 1}}\n", None, "stand_in must be a list"),
        (
            "reproduces:\n  - {table: 000/elapsed, stand_in: [{setting: workload.threen1.stop, ours: 1, theirs: 2}]}\n",
            None,
            "unknown setting 'workload.threen1.stop'",
        ),
    ],
)
def test_bad_scales_and_reproduces_are_one_clear_error(
    tmp_path: Path, extra: str, scale: str | None, message: str
) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        load_text(tmp_path, BASE + extra, scale)
