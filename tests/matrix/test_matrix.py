"""Matrix files: expansion semantics, stable ids, and a clear error for every kind of bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REPO
from fsmatrix import matrix
from fsmatrix.agent.parsing import parse_cell
from fsmatrix.cli import main

EXAMPLE = """\
name: example
axes:
  filesystem: [ext2, ext4, xfs]
  workload:
    - threen1: {start: 1, end: 100000, workers: 4, block: 5000}
    - threen1: {start: 1, end: 1000000, workers: 4, block: 50000}
  gtm.journal: [before, nobefore]
exclude:
  - {filesystem: ext2, gtm.journal: nobefore}
include:
  - {filesystem: ext3, mount_options: "data=writeback", gtm.journal: before,
     workload: {threen1: {start: 1, end: 100000, workers: 4, block: 5000}}}
defaults:
  gtm: {block_size: 4096, global_buffers: 35000}
repeat: 3
"""

REPO_MATRICES = sorted((REPO / "matrix").rglob("*.yaml"))


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_example_expands_to_eleven_cells(write_matrix) -> None:  # type: ignore[no-untyped-def]
    m = matrix.load(write_matrix(EXAMPLE))
    assert m.name == "example" and m.repeat == 3
    assert len(m.cells) == 11  # 3 x 2 x 2 = 12, minus 2 excluded, plus 1 included
    combos = {
        (c.params["filesystem"], c.params["workload"]["threen1"]["end"], c.params["gtm"]["journal"]) for c in m.cells
    }
    assert ("ext2", 100000, "nobefore") not in combos and ("ext2", 1000000, "nobefore") not in combos
    ext3 = [c for c in m.cells if c.params["filesystem"] == "ext3"]
    assert len(ext3) == 1 and ext3[0].params["mount_options"] == "data=writeback"
    for c in m.cells:
        assert c.params["gtm"]["global_buffers"] == 35000  # from defaults
        assert c.params["gtm"]["access_method"] == "BG"  # from the schema's defaults
        assert c.params["workload"]["threen1"]["keys"] == "spelled"
    assert len({c.id for c in m.cells}) == 11


def test_ids_are_stable_whatever_the_key_order(write_matrix) -> None:  # type: ignore[no-untyped-def]
    ids = {c.id for c in matrix.load(write_matrix(EXAMPLE)).cells}
    shuffled = """\
repeat: 3
defaults:
  gtm: {global_buffers: 35000, block_size: 4096}
include:
  - {workload: {threen1: {block: 5000, workers: 4, end: 100000, start: 1}}, gtm.journal: before,
     mount_options: "data=writeback", filesystem: ext3}
exclude:
  - {gtm.journal: nobefore, filesystem: ext2}
axes:
  gtm:
    - {journal: before}
    - {journal: nobefore}
  workload:
    - threen1: {block: 50000, start: 1, end: 1000000, workers: 4}
    - threen1: {workers: 4, block: 5000, end: 100000, start: 1}
  filesystem: [xfs, ext2, ext4]
name: other-name
"""
    assert {c.id for c in matrix.load(write_matrix(shuffled, "b.yaml")).cells} == ids
    # The id is a function of the parameters alone.
    cell = matrix.load(write_matrix(EXAMPLE)).cells[0]
    items = list(cell.params.items())
    random.Random(1).shuffle(items)
    assert matrix.cell_id(parse_cell(dict(items))) == cell.id
    # ... and known in advance: a change here is a change to every stored result's identity.
    assert cell.id.startswith("ext2-threen1-1-100000-w4-")


def test_include_extends_matching_combinations(write_matrix) -> None:  # type: ignore[no-untyped-def]
    m = matrix.load(
        write_matrix("""\
axes:
  filesystem: [ext4, xfs]
  workload: [{threen1: {start: 1, end: 1000}}]
include:
  - {filesystem: xfs, mount_options: noatime}
  - {filesystem: ext4, workload.threen1.workers: 2}
""")
    )
    by_fs = {c.params["filesystem"]: c.params for c in m.cells}
    assert len(m.cells) == 2
    assert by_fs["xfs"]["mount_options"] == "noatime" and by_fs["ext4"]["mount_options"] == ""
    assert by_fs["ext4"]["workload"]["threen1"]["workers"] == 2


def test_github_format_and_sharding(write_matrix) -> None:  # type: ignore[no-untyped-def]
    code, out = cli("matrix", "expand", str(write_matrix(EXAMPLE)), "--format", "github")
    assert code == 0
    doc = json.loads(out)
    assert len(doc["include"]) == 11 and all(len(e["cells"].split(",")) == 1 for e in doc["include"])
    big = (
        "axes:\n  filesystem: [ext2, ext3, ext4, xfs, btrfs, jfs]\n  workload.threen1.end: ["
        + ", ".join(str(1000 + i) for i in range(50))
        + "]\ndefaults: {workload.threen1.start: 1}\n"
    )
    code, out = cli("matrix", "expand", str(write_matrix(big, "big.yaml")), "--format", "github")
    assert code == 0
    shards = json.loads(out)["include"]
    cells = [c for s in shards for c in s["cells"].split(",")]
    assert len(cells) == 300 and len(set(cells)) == 300 and len(shards) <= 256


def test_json_format_lists_full_parameters(write_matrix) -> None:  # type: ignore[no-untyped-def]
    code, out = cli("matrix", "expand", str(write_matrix(EXAMPLE)), "--format", "json")
    cells = json.loads(out)
    assert code == 0 and len(cells) == 11
    assert {"id", "filesystem", "gtm", "workload", "storage"} <= set(cells[0])


@pytest.mark.parametrize("path", REPO_MATRICES, ids=lambda p: p.name)
def test_shipped_matrices_are_valid(path: Path) -> None:
    assert matrix.load(path).cells


def test_seed_matrix_expresses_the_first_experiment() -> None:
    m = matrix.load(REPO / "matrix/seeds/gtm-3n1-filesystems.yaml")
    assert {c.params["filesystem"] for c in m.cells} == {"ext2", "ext3", "ext4", "jfs", "xfs", "btrfs"}
    assert {c.params["workload"]["threen1"]["end"] for c in m.cells} == {
        10**5,
        10**6,
        10**7,
        2 * 10**7,
        4 * 10**7,
    }
    assert {c.params["gtm"]["global_buffers"] for c in m.cells} == {65536}
    assert {c.params["workload"]["threen1"]["workers"] for c in m.cells} == {8}
    assert len(m.cells) == 30


BAD = [
    ("unknown axis", "axes:\n  filesytem: [ext4]\n", 2, ["unknown setting 'filesytem'", "filesystem"]),
    (
        "unknown nested setting",
        "axes:\n  filesystem: [ext4]\ndefaults:\n  gtm: {jounal: before}\n  workload.threen1: {start: 1, end: 9}\n",
        4,
        ["unknown setting 'gtm.jounal'", "journal"],
    ),
    (
        "unknown filesystem",
        "axes:\n  filesystem: [ext4, ext9]\ndefaults: {workload.threen1: {start: 1, end: 9}}\n",
        2,
        ["'ext9'", "one of ext2, ext3, ext4"],
    ),
    ("empty axis", "axes:\n  filesystem: []\n", 2, ["axis 'filesystem' is empty"]),
    (
        "wrong type",
        "axes:\n  filesystem: [ext4]\n  workload:\n    - threen1: {start: 1, end: 100, workers: four}\n",
        4,
        ["workload.threen1.workers", "'four'", "an integer >= 1"],
    ),
    (
        "zero workers",
        "axes:\n  filesystem: [ext4]\n  workload:\n    - threen1: {start: 1, end: 100,\n        workers: 0}\n",
        5,
        ["workload.threen1.workers", "0", "an integer >= 1"],
    ),
    (
        "end below start",
        "axes:\n  filesystem: [ext4]\n  workload:\n    - threen1: {start: 100, end: 10}\n",
        4,
        ["end 10 is below start 100"],
    ),
    (
        "MM with before-image journaling",
        "axes:\n  filesystem: [ext4]\n  gtm.access_method: [BG, MM]\n"
        "defaults:\n  workload.threen1: {start: 1, end: 9}\n",
        3,
        ["'MM' cannot be combined with gtm.journal 'before'", "nobefore"],
    ),
    (
        "exclude removes everything",
        "axes:\n  filesystem: [ext4]\n  workload: [{threen1: {start: 1, end: 9}}]\nexclude:\n  - {filesystem: ext4}\n",
        4,
        ["'exclude' removes every combination"],
    ),
    ("workload missing", "axes:\n  filesystem: [ext4]\n", 2, ["workload is required"]),
    (
        "two workloads in one value",
        "axes:\n  filesystem: [ext4]\n  workload:\n    - {threen1: {start: 1, end: 9}, fio: {pattern: read}}\n",
        4,
        ["exactly one of threen1, sysbench, fio"],
    ),
    (
        "bad size",
        "axes:\n  filesystem: [ext4]\ndefaults:\n  storage.disk_size: 8 gigs\n"
        "  workload.threen1: {start: 1, end: 9}\n",
        4,
        ["storage.disk_size", "'8 gigs'", "a size such as"],
    ),
    ("unknown top-level key", "axis:\n  filesystem: [ext4]\n", 1, ["unknown top-level key 'axis'"]),
    ("bad repeat", "repeat: 0\naxes: {filesystem: [ext4]}\n", 1, ["repeat 0 must be an integer from 1 to 1000"]),
    ("not YAML", "axes:\n  filesystem: [ext4\n", 3, ["not valid YAML"]),
    (
        "sysbench mode",
        "axes:\n  filesystem: [ext4]\n  workload:\n    - sysbench: {mode: randomrw}\n",
        4,
        ["workload.sysbench.mode", "'randomrw'", "rndrw"],
    ),
    (
        "raw device with sysbench",
        "axes:\n  filesystem: [raw]\n  workload:\n    - sysbench: {mode: rndrd}\n",
        2,
        ["filesystem 'raw' runs fio on the block device itself"],
    ),
    (
        "raw device with mount options",
        "axes:\n  filesystem: [raw]\n  workload: [{fio: {pattern: read}}]\ndefaults:\n  mount_options: noatime\n",
        5,
        ["mount_options: filesystem 'raw' has no filesystem"],
    ),
    (
        "physical block below logical",
        "axes:\n  filesystem: [ext4]\n  workload: [{fio: {pattern: read}}]\n"
        "defaults:\n  device: {logical_block_size: 4096, physical_block_size: 512}\n",
        5,
        ["device.physical_block_size 512 is below logical_block_size 4096"],
    ),
    (
        "unknown device profile",
        "axes:\n  filesystem: [ext4]\n  device.profile: [floppy]\n  workload: [{fio: {pattern: read}}]\n",
        3,
        ["device.profile", "'floppy'", "one of native, ssd, hdd"],
    ),
    (
        "one stripe disk",
        "axes:\n  filesystem: [xfs]\n  workload: [{fio: {pattern: read}}]\n"
        "defaults:\n  storage: {layout: md-raid0, stripe_disks: 1}\n",
        5,
        ["storage.stripe_disks", "an integer >= 2"],
    ),
]


@pytest.mark.parametrize(("text", "line", "needles"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_one_clear_error(write_matrix, text: str, line: int, needles: list[str]) -> None:  # type: ignore[no-untyped-def]
    path = write_matrix(text)
    code, out = cli("matrix", "expand", str(path))
    assert code == 2, out
    assert "Traceback" not in out
    assert f"{path}:{line}:" in out, out
    for needle in needles:
        assert needle in out, out


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    code, out = cli("matrix", "expand", str(tmp_path / "nope.yaml"))
    assert code == 2 and "nope.yaml" in out and "cannot read" in out and "Traceback" not in out


def test_comparison_groups_are_the_workload_with_its_parameters(write_matrix) -> None:  # type: ignore[no-untyped-def]
    cells = matrix.load(write_matrix(EXAMPLE)).cells
    groups = {matrix.group_of(c.spec) for c in cells}
    # EXAMPLE crosses two 3n+1 inputs with filesystems and journal settings: two questions.
    assert len(groups) == 2
    by_group = {g: [c.id for c in cells if matrix.group_of(c.spec) == g] for g in groups}
    assert all(len({c.split("-")[0] for c in ids}) > 1 for ids in by_group.values())  # stacks differ inside
    crashed = parse_cell({**cells[0].params, "crash": {"mode": "kill", "after_s": 1}})
    assert matrix.group_of(crashed) != matrix.group_of(cells[0].spec)
    assert "crash: kill" in matrix.group_of(crashed).label
