"""`fsmatrix run --settings FILE`: the settings of a build under test laid over every cell's defaults,
the cells keeping their ids (gate.yml's prepare command; two builds' runs compare as one cell)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsmatrix import matrix
from test_bad_input import refused

MATRIX = """\
name: m
axes:
  filesystem: [tmpfs, ext4]
defaults:
  workload.threen1: {start: 1, end: 50000, workers: 2, block: 5000, keys: integer}
  storage.disk_size: 1G
  gtm.global_buffers: 4000
"""


def files(tmp_path: Path, settings: str) -> tuple[Path, Path]:
    (tmp_path / "m.yaml").write_text(MATRIX)
    (tmp_path / "s.yaml").write_text(settings)
    return tmp_path / "m.yaml", tmp_path / "s.yaml"


def test_settings_reach_every_cell_under_the_same_ids(tmp_path: Path) -> None:
    plain_file, settings_file = files(tmp_path, "workload.threen1.keys: spelled\ngtm: {global_buffers: 5000}\n")
    plain = matrix.load(plain_file)
    built = matrix.load(plain_file, settings=matrix.read_settings(settings_file))
    assert [c.id for c in built.cells] == [c.id for c in plain.cells]
    for cell in built.cells:
        assert cell.spec.params.keys == "spelled" and cell.spec.to_dict()["gtm"]["global_buffers"] == 5000
    assert {c.spec.params.keys for c in plain.cells} == {"integer"}
    assert sorted(built.baselines.values()) == sorted(plain.baselines.values())


def test_empty_settings_change_nothing(tmp_path: Path) -> None:
    plain_file, settings_file = files(tmp_path, "")
    built = matrix.load(plain_file, settings=matrix.read_settings(settings_file))
    assert [c.spec for c in built.cells] == [c.spec for c in matrix.load(plain_file).cells]


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ("filesystem: xfs\n", "s.yaml:1: filesystem is set by the matrix's axes or include"),
        ("- gtm.global_buffers: 1\n", "s.yaml:1: settings must be a mapping of setting -> value"),
        ("gtm.nope: 1\n", "s.yaml:1: unknown setting 'gtm.nope'; allowed under 'gtm'"),
        ("\n\ngtm.global_buffers: lots\n", "s.yaml:3: gtm.global_buffers: 'lots' is not allowed; expected an integer"),
        ("gtm: [1\n", "s.yaml:2: not valid YAML"),
    ],
)
def test_bad_settings_are_refused_with_their_file_and_line(tmp_path: Path, settings: str, why: str) -> None:
    plain_file, settings_file = files(tmp_path, settings)
    line = refused("run", str(plain_file), "--settings", str(settings_file), "--results", str(tmp_path / "r"))
    assert why in line, line


def test_missing_settings_file(tmp_path: Path) -> None:
    plain_file, _ = files(tmp_path, "")
    line = refused("run", str(plain_file), "--settings", str(tmp_path / "none.yaml"), "--results", str(tmp_path / "r"))
    assert "none.yaml: cannot read a settings file: No such file or directory" in line
