"""What each ``include`` entry did: added a cell, or extended existing ones (and the warning when an
entry meant to add a cell extended one instead: GitHub Actions' rule, matrix/README.md)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from fsmatrix import matrix
from fsmatrix.cli import main

FIO = "{fio: {pattern: randread, record_size: 4K, file_size: 256M, runtime: 10}}"
TRAP = f"""\
axes: {{filesystem: [ext4, xfs]}}
include:
  - {{filesystem: ext4, mount_options: "data=writeback", workload: {FIO}}}
  - {{filesystem: btrfs, workload: {FIO}}}
defaults:
  workload: {FIO}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_writeback_include_extends_the_ext4_cell_and_warns(tmp_path: Path) -> None:
    m = matrix.load(write(tmp_path, TRAP))
    ext4 = next(c for c in m.cells if c.spec.filesystem == "ext4")
    assert ext4.spec.mount_options == "data=writeback"  # the plain ext4 cell is gone: the trap
    extended, added = m.includes
    assert (extended.index, extended.line, extended.added, extended.extended) == (0, 3, None, (ext4.id,))
    assert extended.off_axes == ("mount_options", "workload")
    assert extended.warning is not None
    assert "extended 1 cell" in extended.warning and ext4.id in extended.warning
    assert 'mount_options: ["", "data=writeback"]' in extended.warning and "exclude" in extended.warning
    btrfs = next(c for c in m.cells if c.spec.filesystem == "btrfs")
    assert (added.added, added.extended, added.warning) == (btrfs.id, (), None)


def test_expand_prints_what_includes_did(tmp_path: Path) -> None:
    path = write(tmp_path, TRAP)
    result = CliRunner().invoke(main, ["matrix", "expand", str(path)])
    assert result.exit_code == 0, result.output
    assert "include entry 1 (line 3): extended 1 cell: ext4-" in result.stdout
    assert "include entry 2 (line 4): added cell btrfs-" in result.stdout
    assert f"fsmatrix: warning: {path}:3: include entry 1 names mount_options" in result.stderr
    # JSON on stdout stays parseable: the warning goes to stderr only
    result = CliRunner().invoke(main, ["matrix", "expand", str(path), "--format", "json"])
    assert result.stdout.lstrip().startswith("[") and "warning" in result.stderr


def test_an_include_on_an_axis_value_adds_without_warning(tmp_path: Path) -> None:
    text = TRAP.replace("axes: {filesystem: [ext4, xfs]}", 'axes: {filesystem: [ext4, xfs], mount_options: [""]}')
    m = matrix.load(write(tmp_path, text))
    assert [e.added is not None for e in m.includes] == [True, True]
    assert all(e.warning is None for e in m.includes)
    assert {c.spec.mount_options for c in m.cells if c.spec.filesystem == "ext4"} == {"", "data=writeback"}
