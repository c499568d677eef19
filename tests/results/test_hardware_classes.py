"""A fleet's shards merged into one report (issue 28): cells measured on different hardware classes are
never set side by side in one table or one comparison without saying so. The shards' result documents
are written here with the provenance two hosts would give them (fake hosts: what is tested is the merge
and the report, not the measurement)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from conftest import typed
from fsmatrix import matrix
from fsmatrix.agent import jsonfile
from fsmatrix.cli import main
from fsmatrix.results import store
from fsmatrix.results.render import tables
from fsmatrix.results.store import Result
from fsmatrix.results.verdict import answer, answering, hardware

MATRIX = """\
name: fleet
axes:
  filesystem: [ext4, xfs, btrfs, jfs]
defaults:
  workload.threen1: {start: 1, end: 1000}
"""
HOST_A = {
    "cpu_model": "Fake CPU A",
    "cpu_count": 8,
    "memory_kib": 32 * 2**20 - 1234,  # a few MiB short of 32 GiB, as machines report it
    "machine_id": "aaaa",
    "workdir": {"fstype": "ext4", "disk": {"model": "NVMe X", "rotational": False}},
}
HOST_B = {
    "cpu_model": "Fake CPU B",
    "cpu_count": 4,
    "memory_kib": 16 * 2**20,
    "machine_id": "bbbb",
    "workdir": {"fstype": "ext4", "disk": {"model": "Disk Y", "rotational": True}},
}
CLASS_A = "Fake CPU A, 8 CPUs, 32 GiB, disk NVMe X (SSD)"
CLASS_B = "Fake CPU B, 4 CPUs, 16 GiB, disk Disk Y (rotational)"
SECONDS = {"ext4": 1.0, "xfs": 2.0, "btrfs": 3.0, "jfs": 4.0, "tmpfs": 0.5}


def shard(root: Path, cells: list[matrix.MatrixCell], host: dict[str, Any], run_id: str = "fleet") -> Path:
    """What one shard's artefact holds: its cells' results (3 repeats) with ``host`` as provenance."""
    for cell in cells:
        for r in (1, 2, 3):
            doc = {
                "schema_version": 1,
                "run_id": run_id,
                "cell_id": cell.id,
                "repeat": r,
                "workload": "threen1",
                "status": "passed",
                "params": cell.params,
                "metrics": {"elapsed_s": SECONDS[cell.spec.filesystem] * (1 + r / 100)},
                "key_metrics": {"elapsed_s": "lower"},
                "provenance": {"backend": "host", "kernel": "6.1", "host": copy.deepcopy(host)},
            }
            jsonfile.write_atomic(store.result_path(root / run_id, cell.id, r), doc)
    return root


def merged_report(tmp_path: Path, hosts: tuple[dict[str, Any], dict[str, Any]]) -> tuple[str, answer.Answer]:
    path = tmp_path / "fleet.yaml"
    path.write_text(MATRIX)
    cells = matrix.load(path).cells
    a = shard(tmp_path / "shard-0", cells[:2], hosts[0])
    b = shard(tmp_path / "shard-1", cells[2:], hosts[1])
    merged = tmp_path / "merged"
    out = CliRunner().invoke(main, ["results", "merge", str(a), str(b), "--into", str(merged)])
    assert out.exit_code == 0, out.output
    out = CliRunner().invoke(main, ["report", str(merged / "fleet"), "--html", str(tmp_path / "html")])
    assert out.exit_code == 0, out.output
    return out.output, answering.build(typed(store.load_results(merged / "fleet")))


def table_sections(text: str) -> list[str]:
    """The report's threen1 section cut at each table heading (### ...)."""
    section = text.split("\n## threen1\n")[1].split("\n## Runs")[0]
    return section.split("\n### ")


def test_shards_from_two_hardware_classes_are_split_and_the_report_says_why(tmp_path: Path) -> None:
    text, found = merged_report(tmp_path, (HOST_A, HOST_B))
    parts = table_sections(text)
    assert hardware.why([CLASS_A, CLASS_B]) in parts[0]  # said once, before the tables
    by_class = {p.split("\n")[0]: p for p in parts[1:]}
    assert sorted(by_class) == sorted(f"{tables.HARDWARE}={c}" for c in (CLASS_A, CLASS_B))
    # Each table holds one class's cells only: ext4 and xfs ran on A, btrfs and jfs on B.
    a, b = by_class[f"{tables.HARDWARE}={CLASS_A}"], by_class[f"{tables.HARDWARE}={CLASS_B}"]
    assert "ext4" in a and "xfs" in a and "btrfs" not in a and "jfs" not in a
    assert "btrfs" in b and "jfs" in b and "ext4" not in b and "xfs" not in b
    # The answer compares within a class too, and its groups name the class.
    assert sorted(g.label.split(" on ")[1] for g in found.groups) == sorted([CLASS_A, CLASS_B])
    for g in found.groups:
        names = {c.name for c in g.configurations}
        assert names in ({"ext4", "xfs"}, {"btrfs", "jfs"})
    assert "WARNING: these results come from different environments" in text
    page = (tmp_path / "html" / "report.html").read_text()
    assert f"These runs come from 2 hardware classes (1. {CLASS_A}; 2. {CLASS_B})" in page
    assert page.count(f"<h3>{tables.HARDWARE}=") == 2


def test_one_hardware_class_is_one_table_and_no_note(tmp_path: Path) -> None:
    # Two machines of one class (other machine ids, memory a few MiB apart) are alike.
    twin = {**HOST_A, "machine_id": "cccc", "memory_kib": 32 * 2**20 - 2048}
    text, found = merged_report(tmp_path, (HOST_A, twin))
    parts = table_sections(text)
    assert len(parts) == 1 and "hardware classes" not in text
    assert len(found.groups) == 1 and " on " not in found.groups[0].label
    assert {c.name for c in found.groups[0].configurations} == {"ext4", "xfs", "btrfs", "jfs"}


def test_a_cell_whose_runs_came_from_two_classes_is_in_both_tables() -> None:
    def on(host: dict[str, Any] | None) -> Result:
        return Result.read({"cell_id": "c", "repeat": 1, "status": "passed", "provenance": {"host": host}})

    cells = {"c1": [on(HOST_A), on(HOST_B)], "c2": [on(None)]}
    split = hardware.split(cells)
    assert list(split) == [CLASS_A, CLASS_B, hardware.UNKNOWN]
    assert [len(v["c1"]) for k, v in split.items() if "c1" in v] == [1, 1]
