"""The seeds' published tables as data (matrix/seeds/published/): they load, match the seed texts
in ../shared/seeds where those are present, and every claim parses and names rows and columns
that exist."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import SHARED
from fsmatrix.errors import UserError
from fsmatrix.results.store import published

SEEDS = SHARED / "seeds"
SEED_FILES = {
    "000": "000_d89b434667a8f4fa.txt",
    "001": "001_86dff158bf43e860.txt",
    "002": "002_fe26fcb111f2a964.txt",
    "004": "004_6f35057b61f91be7.txt",
}


@pytest.fixture(scope="module")
def data() -> published.Published:
    return published.load()


def seed_text(seed: str) -> str:
    path = SEEDS / SEED_FILES[seed]
    if not path.is_file():
        pytest.skip(f"{path} is not here (the seeds live beside the project, in ../shared/seeds)")
    return path.read_text(encoding="utf-8")


def test_loads_every_seed(data: published.Published) -> None:
    assert {t.seed for t in data.tables.values()} == {"000", "001", "002", "003", "004"}
    assert {c.seed for c in data.claims} == {"000", "001", "002", "003", "004"}
    assert data.tables["000/elapsed"].values[("20000000", "btrfs")] == 28667
    assert data.tables["000/elapsed"].units[("20000000", "btrfs")] == "s"
    assert data.tables["000/sync_io"].baseline == "plain"


def _markdown_table(text: str, heading: str) -> dict[tuple[str, str], float]:
    """(row, column) -> value of the first Markdown table after ``heading`` in a seed text."""
    after = text[text.index(heading) :]
    lines = [line for line in after.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    out = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not cells[0].replace(",", "").isdigit():
            break
        for name, cell in zip(header[1:], cells[1:], strict=False):
            if cell:
                out[(cells[0].replace(",", ""), name)] = float(cell.replace(",", ""))
    return out


@pytest.mark.parametrize(
    ("heading", "table"),
    [
        ("The elapsed times in seconds", "000/elapsed"),
        ("The read rates", "000/read_rate"),
        ("The update rates", "000/update_rate"),
    ],
)
def test_seed_000_tables_match_the_text(data: published.Published, heading: str, table: str) -> None:
    seed = _markdown_table(seed_text("000"), heading)
    names = {"xf": "xfs"}  # the seed's own typo in two headers
    expected = {(row, names.get(col, col)): v for (row, col), v in seed.items()}
    assert data.tables[table].values == expected


def test_seed_000_future_work_spot_values(data: published.Published) -> None:
    text = seed_text("000")
    assert "| 40,000,000 | | 50,378 | 2,341 | 21.5 |" in text
    assert data.tables["000/ssd"].values[("40000000", "ssd")] == 2341
    assert data.tables["000/ssd_ratio"].values[("40000000", "ratio")] == 21.5
    assert "| jfs | Yes | No | 1,733 | 143% |" in text
    assert data.tables["000/sync_io"].values[("jfs", "sync_io")] == 1733
    assert "| ext4 | Yes | Yes | 3,050 | 73% |" in text
    assert data.tables["000/sync_io_speed"].values[("ext4", "both")] == 73


def test_seed_001_spot_values(data: published.Published) -> None:
    text = seed_text("001")
    for table, cell, shown in [
        ("001/xlog_rewrite", ("rewrite", "ext2"), "115378.34"),
        ("001/data_randwrite", ("randwrite", "ext3-journal"), "49444.73"),
        ("001/data_randwrite", ("randwrite", "ext3-writeback"), "168948.55"),
        ("001/concurrency", ("1", "data2"), "105375.49"),
    ]:
        assert re.search(rf"=\s+{re.escape(shown)} KB/sec", text)
        assert data.tables[table].values[cell] == float(shown)
    four = [float(x) for x in re.findall(r"Avg throughput per process\s+=\s+([\d.]+)", text)[9:13]]
    assert data.tables["001/concurrency"].values[("4", "data1")] == pytest.approx(sum(four))
    four2 = [float(x) for x in re.findall(r"Avg throughput per process\s+=\s+([\d.]+)", text)[13:17]]
    assert data.tables["001/concurrency"].values[("4", "data2")] == pytest.approx(sum(four2))


def test_seed_002_spot_values(data: published.Published) -> None:
    text = seed_text("002")
    assert "Eight worker processes - jfs: 248; ext4: 104" in text
    assert data.tables["002/elapsed"].values[("gb1000-jb128", "jfs-w8")] == 248
    assert data.tables["002/elapsed"].values[("gb1000-jb128", "ext4-w8")] == 104
    assert "Four worker processes - jfs: 81; ext4: 61" in text
    assert data.tables["002/elapsed"].values[("gb5000-jb128", "jfs-w4")] == 81
    assert "ext4: 30, 31,36" in text
    assert data.tables["002/runs35000"].values[("r3", "ext4-w8")] == 36


def test_seed_004_tables_match_the_text(data: published.Published) -> None:
    text = seed_text("004")
    for table, start in (("004/as3ap", "Figure 1"), ("004/tpcc", "Figure 2")):
        block = text[text.index(start) :]
        numbers = re.findall(r"^\t([\d,.]+)$", block, re.M)[:36]
        ours = data.tables[table]
        rows = ["ext2", "ext3", "reiserfs", "jfs", "raw"]
        cols = ["create", "load", "index", "total", "tps", "avg"]
        expected = [ours.values[(r, c)] for r in rows for c in cols]
        assert [float(n.replace(",", "")) for n in numbers[:30]] == expected


def test_every_claim_names_existing_rows_and_columns(data: published.Published) -> None:
    for claim in data.claims:
        table = data.tables[claim.table]
        assert table.compare
        for row, col in claim.cells:
            assert row in table.row_labels() and col in table.column_labels()
        if claim.series is not None:
            assert claim.series in table.series_labels()
            assert set(claim.entries) <= set(table.entry_labels())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fastest(000/elapsed, 20000000, ext2)", "unknown kind 'fastest'"),
        ("best(000/nope, 20000000, ext2)", "no table '000/nope'"),
        ("best(000/elapsed, 30000000, ext2)", "no row '30000000'"),
        ("best(000/elapsed, 20000000, ext9)", "no column 'ext9'"),
        ("best(000/elapsed, 20000000, ext2, among=[zfs])", "no column 'zfs'"),
        ("best(000/elapsed, 20000000, ext2, among ext3)", "should be among="),
        ("better(000/elapsed, 20000000:ext2, 20000000-btrfs)", "is not ROW:COLUMN"),
        ("better(000/elapsed, 20000000:ext2, 20000000:ext2)", "with itself"),
        ("better(000/elapsed, 20000000:ext2, 20000000:btrfs, by>=0.5)", "by>=X with X a number >= 1"),
        ("order(000/elapsed, 20000000, ext2)", "two or more different entries"),
        ("order(000/elapsed, 20000000, ext2 > ext2)", "two or more different entries"),
        ("best(000/ssd_ratio, 20000000, ratio)", "data only"),
        ("best 000/elapsed", "expected KIND(TABLE"),
        ("best(004/as3ap, total, xfs)", "no row 'xfs'"),
    ],
)
def test_a_bad_claim_is_one_clear_error(data: published.Published, text: str, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        published.parse_claim(text, data.tables)


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "published"
    shutil.copytree(published.DEFAULT_DIR, target)
    return target


@pytest.mark.parametrize(
    ("file", "old", "new", "message"),
    [
        ("000.csv", "000,elapsed,20000000,ext2,1680,s", "000,elapsed,20000000,ext2,1,680,s", "7 fields"),
        ("000.csv", "000,elapsed,20000000,ext2,1680,s", "000,elapsed,20000000,ext2,lots,s", "not a number"),
        ("000.csv", "000,elapsed,20000000,ext2,1680,s", "000,elapsd,20000000,ext2,1680,s", "000/elapsd is not in"),
        ("000.csv", "000,sync_io,jfs,plain,2484,s", "000,sync_io,jfs,plane,2484,s", "no column 'plane'"),
        ("000.csv", "000,elapsed,20000000,ext2,1680,s", "000,elapsed,20000000,ext3,1680,s", "given twice"),
        ("tables.yml", "metric: elapsed_s", "metric: elapsed", "has no metric 'elapsed'"),
        ("tables.yml", "relative_to: plain}", "relative_to: plan}", "relative_to 'plan'"),
        ("claims.yml", "20000000, btrfs)", "20000000, btrf)", "no column 'btrf'"),
        ("claims.yml", "id: 000-btrfs-slowest", "id: 000-ext2-fastest", "used twice"),
    ],
)
def test_bad_data_fails_loading(tmp_path: Path, file: str, old: str, new: str, message: str) -> None:
    directory = _copy(tmp_path)
    path = directory / file
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(UserError, match=re.escape(message)):
        published.load(directory)
