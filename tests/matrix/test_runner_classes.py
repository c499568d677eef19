"""Runner classes (issue 28): ``runner: {labels: [...]}`` at the top level or per cell (include, axes),
each shard's labels in ``matrix expand --format github`` (matrix.yml's ``runs-on``), ids of cells
without labels unchanged, and bad label syntax refused with file, line and value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from fsmatrix import matrix
from fsmatrix.errors import UserError
from test_bad_input import expand_refuses
from test_matrix import cli

BASE = """\
axes:
  filesystem: [tmpfs, ext4, xfs]
defaults:
  workload.threen1: {start: 1, end: 1000}
"""
CLASSED = """\
runner: {labels: [self-hosted, nvme]}
axes:
  filesystem: [tmpfs, ext4, xfs]
include:
  - filesystem: xfs
    runner: {labels: [self-hosted, hdd]}
defaults:
  workload.threen1: {start: 1, end: 1000}
"""


def test_labels_reach_each_cell_and_move_only_the_ids_of_cells_that_name_them(write_matrix) -> None:  # type: ignore[no-untyped-def]
    plain = matrix.load(write_matrix(BASE, "plain.yaml"))
    classed = matrix.load(write_matrix(CLASSED, "classed.yaml"))
    assert [c.runner for c in plain.cells] == [(), (), ()]
    by_fs = {c.spec.filesystem: c for c in classed.cells}
    assert by_fs["tmpfs"].runner == by_fs["ext4"].runner == ("self-hosted", "nvme")
    assert by_fs["xfs"].runner == ("self-hosted", "hdd")  # the include entry overrides the top level
    # Where a cell runs is the matrix's business: the agent's job (params) never carries it.
    assert all("runner" not in c.params for c in classed.cells)
    # A cell with labels is another cell (its id hashes them); one without keeps the id it had.
    assert {c.id for c in plain.cells}.isdisjoint(c.id for c in classed.cells)
    assert [c.id for c in plain.cells] == [matrix.cell_id(c.spec) for c in plain.cells]
    # No include warning: giving existing cells a runner class is what the include is for.
    assert all(effect.warning is None for effect in classed.includes)


def test_labels_as_an_axis_and_in_defaults(write_matrix) -> None:  # type: ignore[no-untyped-def]
    text = BASE.replace("axes:\n", "axes:\n  runner.labels: [[fast], [slow]]\n")
    m = matrix.load(write_matrix(text))
    assert sorted(c.runner for c in m.cells) == [("fast",)] * 3 + [("slow",)] * 3
    m = matrix.load(write_matrix(BASE + "  runner: {labels: [gpu-box]}\n", "d.yaml"))
    assert {c.runner for c in m.cells} == {("gpu-box",)}


def test_github_format_emits_each_shards_labels_and_never_mixes_classes(write_matrix) -> None:  # type: ignore[no-untyped-def]
    code, out = cli("matrix", "expand", str(write_matrix(CLASSED)), "--format", "github", "--shard-size", "5")
    assert code == 0, out
    shards = json.loads(out)["include"]
    assert [(len(s["cells"].split(",")), s["labels"]) for s in shards] == [
        (2, ["self-hosted", "nvme"]),
        (1, ["self-hosted", "hdd"]),
    ]
    code, out = cli("matrix", "expand", str(write_matrix(BASE, "plain.yaml")), "--format", "github")
    assert code == 0 and all("labels" not in s for s in json.loads(out)["include"])


def test_matrix_workflow_runs_each_shard_on_its_labels() -> None:
    job = yaml.safe_load((REPO / ".github/workflows/matrix.yml").read_text())["jobs"]["run"]
    assert job["runs-on"].startswith("${{ matrix.labels || fromJSON(vars.FSMATRIX_RUNNER_LABELS")


@pytest.mark.parametrize(
    ("line", "needles"),
    [
        ('runner: {labels: [ok, "bad label"]}', ["runner.labels.1: 'bad label' is not allowed", "a runner label"]),
        ("runner: {labels: []}", ["runner.labels: [] is not allowed", "a list of 1 to 20"]),
        ("runner: {labels: [a, a]}", ['runner.labels: ["a", "a"] is not allowed', "different values"]),
        ("runner: {labels: gpu}", ["runner.labels: 'gpu' is not allowed"]),
        ("runner: gpu", ["runner: 'gpu' is not allowed; expected a mapping with keys labels"]),
        ("runner: {label: [gpu]}", ["unknown setting 'runner.label'; allowed under 'runner': labels"]),
        ("runner: {labels: [5]}", ["runner.labels.0: 5 is not allowed"]),
    ],
)
def test_bad_labels_are_refused_with_file_line_and_value(write_matrix, line: str, needles: list[str]) -> None:  # type: ignore[no-untyped-def]
    path = write_matrix(BASE + line + "\n")
    with pytest.raises(UserError) as refused:
        matrix.load(path)
    assert str(refused.value).startswith(f"{path}:5: ")
    for needle in needles:
        assert needle in str(refused.value), refused.value


def test_bad_labels_from_the_command_line_one_line_exit_2(tmp_path: Path) -> None:
    text = BASE + "  runner: {labels: [a]}\nrunner: {labels: [b]}\n"
    refused = expand_refuses(tmp_path, text)
    assert ":6: runner is set at the top level and in defaults; set it in one place" in refused
