"""Baselines (issue 24, item 1): each comparison group of a matrix has one baseline cell, the one its
file's `baseline` names (settings or a cell id glob) or, without one, the cell with the fewest
settings off their defaults (the first of those in expansion order); the matrix records which rule
chose it, `matrix expand` and a run's matrix.json show it, and a `baseline` that matches no cell or
several in a group is refused with one line naming the file, the line, the group and the cells."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FSMATRIX, REPO
from fsmatrix import matrix, runs
from fsmatrix.cli import main
from fsmatrix.errors import UserError
from fsmatrix.matrix import yamlpos

# Two comparison groups (two 3n+1 inputs), each crossed with three filesystems and two journal settings.
TWO_GROUPS = """\
name: base
axes:
  filesystem: [xfs, ext4, jfs]
  workload:
    - threen1: {start: 1, end: 1000, workers: 2, block: 100}
    - threen1: {start: 1, end: 2000, workers: 2, block: 100}
  gtm.journal: [nobefore, before]
defaults:
  gtm: {block_size: 4096, global_buffers: 1000}
"""


def expand_cli(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [*FSMATRIX, "matrix", "expand", str(path), *args]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_a_named_mapping_picks_one_cell_per_group(write_matrix) -> None:  # type: ignore[no-untyped-def]
    m = matrix.load(write_matrix(TWO_GROUPS + "baseline: {filesystem: ext4, gtm.journal: before}\n"))
    assert m.baseline_rule == matrix.NAMED_RULE
    assert len(m.baselines) == 2
    for cell_id in m.baselines.values():
        cell = next(c for c in m.cells if c.id == cell_id)
        assert cell.params["filesystem"] == "ext4" and cell.params["gtm"]["journal"] == "before"
        assert m.is_baseline(cell)
    assert sum(m.is_baseline(c) for c in m.cells) == 2


OPTIONS = """\
name: opts
axes:
  filesystem: [xfs, ext4]
  mount_options: ["", noatime]
  gtm.journal: [before, nobefore]
  workload: [{threen1: {start: 1, end: 1000, workers: 2}}]
"""


def test_a_named_mapping_may_be_nested_and_name_a_default_value(write_matrix) -> None:  # type: ignore[no-untyped-def]
    # The empty string, mount_options' default, is a value like any other.
    text = OPTIONS + 'baseline: {filesystem: ext4, mount_options: "", gtm: {journal: nobefore}}\n'
    m = matrix.load(write_matrix(text))
    (chosen,) = (c for c in m.cells if m.is_baseline(c))
    assert chosen.params["filesystem"] == "ext4" and chosen.params["mount_options"] == ""
    assert chosen.params["gtm"]["journal"] == "nobefore"
    with pytest.raises(UserError, match="matches 2 cells"):
        matrix.load(write_matrix(OPTIONS + "baseline: {filesystem: ext4, gtm.journal: nobefore}\n"))


def test_a_named_glob_picks_by_cell_id(write_matrix) -> None:  # type: ignore[no-untyped-def]
    text = TWO_GROUPS.replace("  gtm.journal: [nobefore, before]\n", "")
    m = matrix.load(write_matrix(text + "baseline: 'jfs-*'\n"))
    assert m.baseline_rule == matrix.NAMED_RULE
    chosen = [c for c in m.cells if m.is_baseline(c)]
    assert len(chosen) == 2 and all(c.params["filesystem"] == "jfs" for c in chosen)
    assert set(m.baselines.values()) == {c.id for c in chosen}
    # An exact id is a glob too (one group here).
    one = OPTIONS.replace("  gtm.journal: [before, nobefore]\n", "")
    target = matrix.load(write_matrix(one)).cells[-1].id
    assert list(matrix.load(write_matrix(one + f"baseline: {target}\n")).baselines.values()) == [target]


def test_without_a_baseline_the_cell_at_its_defaults_is_chosen_and_the_rule_recorded(write_matrix) -> None:  # type: ignore[no-untyped-def]
    m = matrix.load(write_matrix(TWO_GROUPS))
    assert m.baseline_rule == matrix.DEFAULTS_RULE == "defaults"
    chosen = [c for c in m.cells if m.is_baseline(c)]
    assert len(chosen) == 2
    # gtm.journal's default is "before": the nobefore cells are one setting off. Of the three
    # filesystems (none has a default), the first axis value wins: xfs, as the file lists it.
    assert all(c.params["gtm"]["journal"] == "before" and c.params["filesystem"] == "xfs" for c in chosen)


def test_the_matrix_defaults_count_as_defaults(write_matrix) -> None:  # type: ignore[no-untyped-def]
    # device.profile is native by the schema; the file's defaults make it hdd, so native is off.
    text = """\
name: d
include:
  - {filesystem: ext4, device.profile: native}
  - {filesystem: ext4, device.profile: ssd}
  - {filesystem: ext4, device.profile: hdd}
  - {filesystem: ext4, device.profile: hdd, mount_options: noatime}
defaults:
  workload.fio: {pattern: randread, record_size: 4K, file_size: 16M, runtime: 5}
  device.profile: hdd
"""
    m = matrix.load(write_matrix(text))
    (chosen,) = (c for c in m.cells if m.is_baseline(c))
    assert chosen.params["device"]["profile"] == "hdd" and chosen.params["mount_options"] == ""
    without = matrix.load(write_matrix(text.replace("  device.profile: hdd\n", "")))
    (chosen,) = (c for c in without.cells if without.is_baseline(c))
    assert chosen.params["device"]["profile"] == "native"


def test_a_scale_may_set_its_own_baseline(write_matrix) -> None:  # type: ignore[no-untyped-def]
    text = TWO_GROUPS + "baseline: {filesystem: ext4, gtm.journal: before}\nscales:\n  small:\n"
    text += "    axes: {filesystem: [xfs, jfs], workload: [{threen1: {start: 1, end: 500, workers: 2}}]}\n"
    with pytest.raises(UserError, match="matches no cell"):
        matrix.load(write_matrix(text), "small")  # the file's baseline, ext4, is not at this scale
    m = matrix.load(write_matrix(text + "    baseline: {filesystem: jfs}\n"), "small")
    (chosen,) = m.baselines.values()
    assert chosen.startswith("jfs-") and m.baseline_rule == "named"
    m = matrix.load(write_matrix(text + "    baseline: null\n"), "small")  # back to the defaults rule
    assert m.baseline_rule == "defaults" and next(iter(m.baselines.values())).startswith("xfs-")


def test_a_setting_the_group_does_not_have_is_not_compared(write_matrix) -> None:  # type: ignore[no-untyped-def]
    # One baseline for a 3n+1 group and a pgbench group: each compares the settings it has.
    text = """\
name: two
axes:
  filesystem: [ext4, xfs]
  workload: [{threen1: {start: 1, end: 1000, workers: 2}}]
  gtm.journal: [before, nobefore]
include:
  - {filesystem: ext4, workload: {pgbench: {scale: 1, duration: 5}}, postgres.synchronous_commit: "on"}
  - {filesystem: ext4, workload: {pgbench: {scale: 1, duration: 5}}, postgres.synchronous_commit: "off"}
baseline: {filesystem: ext4, gtm.journal: nobefore, postgres.synchronous_commit: "off"}
"""
    m = matrix.load(write_matrix(text))
    chosen = {c.workload_kind: c for c in m.cells if m.is_baseline(c)}
    assert chosen["threen1"].params["gtm"]["journal"] == "nobefore"
    assert chosen["pgbench"].params["postgres"]["synchronous_commit"] == "off"


# ------------------------------------------------------------------ refusals: one line, file and line, exit 2

REFUSED = [
    (
        "no cell",
        TWO_GROUPS + "baseline: {filesystem: btrfs}\n",
        10,
        ['baseline {"filesystem": "btrfs"} matches no cell in group \'threen1 1..1000', "its cells: xfs-threen1-"],
    ),
    (
        "several",
        TWO_GROUPS + "baseline: {filesystem: ext4}\n",
        10,
        ["matches 2 cells in group 'threen1 1..1000", "ext4-threen1-1-1000-w2-", "exactly one"],
    ),
    (
        "glob none",
        TWO_GROUPS + "baseline: 'btrfs-*'\n",
        10,
        ["baseline 'btrfs-*' matches no cell in group"],
    ),
    (
        "glob several",
        TWO_GROUPS + "baseline: '*'\n",
        10,
        ["baseline '*' matches 6 cells in group"],
    ),
    (
        "unknown setting",
        TWO_GROUPS + "baseline:\n  filesystem: ext4\n  gtm.jornal: before\n",
        12,
        ["unknown setting 'gtm.jornal'", "allowed under 'gtm'", "journal"],
    ),
    (
        "value not allowed",
        TWO_GROUPS + "baseline: {filesystem: ext5}\n",
        10,
        ["baseline: filesystem: 'ext5' is not allowed; expected one of", "ext4"],
    ),
    (
        "unquoted on",
        TWO_GROUPS + "baseline: {filesystem: ext4, postgres.synchronous_commit: on}\n",
        10,
        ["postgres.synchronous_commit: true is not allowed", "quote it"],
    ),
    (
        "not a mapping",
        TWO_GROUPS + "baseline: [ext4]\n",
        10,
        ["'baseline' must be a non-empty mapping of settings", "or a cell id glob"],
    ),
    (
        "empty mapping",
        TWO_GROUPS + "baseline: {}\n",
        10,
        ["'baseline' must be a non-empty mapping"],
    ),
]


@pytest.mark.parametrize(("text", "line", "needles"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_a_bad_baseline_is_one_clear_error(write_matrix, text: str, line: int, needles: list[str]) -> None:  # type: ignore[no-untyped-def]
    path = write_matrix(text)
    result = CliRunner().invoke(main, ["matrix", "expand", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert f"{path}:{line}:" in result.output, result.output
    for needle in needles:
        assert needle in result.output, result.output


@pytest.mark.parametrize("baseline", ["{filesystem: btrfs}", "{filesystem: ext4}"], ids=["none", "several"])
def test_the_command_line_refuses_a_bad_baseline_in_one_line(write_matrix, baseline: str) -> None:  # type: ignore[no-untyped-def]
    path = write_matrix(TWO_GROUPS + f"baseline: {baseline}\n")
    out = expand_cli(path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert f"{path}:10: baseline" in out.stderr and "in group 'threen1 1..1000" in out.stderr


# ------------------------------------------------------------------ where it shows: expand, matrix.json


def test_expand_marks_the_baseline(write_matrix) -> None:  # type: ignore[no-untyped-def]
    path = write_matrix(TWO_GROUPS + "baseline: {filesystem: ext4, gtm.journal: before}\n")
    m = matrix.load(path)
    listed = json.loads(expand_cli(path, "--format", "json").stdout)
    assert [e["id"] for e in listed] == [c.id for c in m.cells]
    assert {e["id"] for e in listed if e["baseline"]} == set(m.baselines.values())
    assert {e["group"] for e in listed} == set(m.baselines)
    assert all(e["group"] == matrix.group_of(c.spec).key for e, c in zip(listed, m.cells, strict=True))
    table = expand_cli(path).stdout
    assert "baseline" in table and "named by the file's baseline" in table
    marked = [line for line in table.splitlines() if "│ *" in line]
    assert len(marked) == 2 and all("ext4-threen1-" in line for line in marked)
    github = json.loads(expand_cli(path, "--format", "github").stdout)
    assert set(github) == {"include"} and set(github["include"][0]) == {"shard", "cells"}  # unchanged


def test_matrix_json_records_groups_and_baselines(write_matrix) -> None:  # type: ignore[no-untyped-def]
    m = matrix.load(write_matrix(TWO_GROUPS))
    selected = m.select(["xfs-*", "ext4-*"])
    record = runs.matrix_record(m, selected, 3)
    assert {k: record[k] for k in ("name", "file", "repeat")} == {"name": "base", "file": m.path, "repeat": 3}
    assert record["baseline_rule"] == "defaults" and record["baselines"] == m.baselines
    assert [e["id"] for e in record["cells"]] == [c.id for c in selected]
    for entry, cell in zip(record["cells"], selected, strict=True):
        group = matrix.group_of(cell.spec)
        assert entry["params"] == cell.params
        assert (entry["group"], entry["group_label"]) == (group.key, group.label)
        assert entry["baseline"] == (m.baselines[group.key] == cell.id)
    assert sum(e["baseline"] for e in record["cells"]) == 2
    json.dumps(record)  # plain JSON


# ------------------------------------------------------------------ every matrix in the repository


def _every_matrix_and_scale() -> list[tuple[Path, str | None]]:
    cases: list[tuple[Path, str | None]] = []
    for path in sorted((REPO / "matrix").rglob("*.yaml")):
        doc = yamlpos.load(path.read_text(encoding="utf-8"))
        cases += [(path, scale) for scale in [None, *matrix.scale_names(doc)]]
    return cases


@pytest.mark.parametrize(
    ("path", "scale"),
    _every_matrix_and_scale(),
    ids=lambda v: (str(v.relative_to(REPO / "matrix")) if isinstance(v, Path) else str(v)),
)
def test_every_matrix_has_one_baseline_in_every_group(path: Path, scale: str | None) -> None:
    m = matrix.load(path, scale)
    groups = {matrix.group_of(c.spec).key for c in m.cells}
    assert set(m.baselines) == groups
    for key, cell_id in m.baselines.items():
        (cell,) = (c for c in m.cells if c.id == cell_id)
        assert matrix.group_of(cell.spec).key == key
    assert sum(m.is_baseline(c) for c in m.cells) == len(groups)
    assert m.baseline_rule in ("named", "defaults")
