"""The report's "Against the published results" section, on synthetic results of the seed
matrices: a claim that holds, one that does not, one inside the noise, one not measured; the
published and our values normalised side by side; Kendall's tau; Markdown and HTML."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, typed
from fsmatrix import matrix
from fsmatrix.agent import workloads
from fsmatrix.results.render import markdown, seed
from fsmatrix.results.render import page as html_page
from fsmatrix.results.store import Result, published
from fsmatrix.results.verdict import claims, report

SEEDS = REPO / "matrix" / "seeds"


def run_dir_for(tmp_path: Path, matrix_file: Path) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "matrix.json").write_text(json.dumps({"name": "x", "file": str(matrix_file), "cells": []}))
    return run_dir


def docs_for(
    run_dir: Path, cells: list[matrix.MatrixCell], values: dict[str, list[float]], metric: str
) -> list[Result]:
    """Passed runs of the cells whose id starts with a key of ``values``, ``metric`` set per repeat."""
    docs = []
    for c in cells:
        key = next((k for k in values if c.id.startswith(k)), None)
        if key is None:
            continue
        kind = c.workload_kind
        for i, v in enumerate(values[key], start=1):
            metrics = {m.name: 1.0 for m in workloads.get(kind).metrics}
            metrics[metric] = v
            doc = {
                "cell_id": c.id,
                "repeat": i,
                "status": "passed",
                "workload": kind,
                "params": c.params,
                "metrics": metrics,
                "key_metrics": {m.name: m.better for m in workloads.get(kind).metrics},
            }
            docs.append(Result.read(doc, run_dir / c.id / f"r{i}.json"))  # where the report finds its matrix
    return docs


def verdicts(docs: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """claim id -> (verdict, evidence) from the section's claims table."""
    out = {}
    table = next(c for k, c in seed.blocks(typed(docs)) if k == "table" and c[0][0] == "claim")
    for row in table[1]:
        out[row[0]] = (row[3], row[4])
    return out


@pytest.fixture
def small_000(tmp_path: Path) -> tuple[Path, list[matrix.MatrixCell]]:
    path = SEEDS / "gtm-3n1-filesystems.yaml"
    return run_dir_for(tmp_path, path), matrix.load(path, "small").cells


SEPARATED = {
    "ext2-": [100.0, 102.0, 101.0],
    "ext4-": [150.0, 149.0, 152.0],
    "jfs-": [161.0, 163.0, 160.0],
    "xfs-": [171.0, 170.0, 174.0],
    "ext3-": [250.0, 255.0, 251.0],
    "btrfs-": [300.0, 310.0, 305.0],
}


def test_claims_that_hold_with_the_published_ranking(small_000: tuple[Path, list[matrix.MatrixCell]]) -> None:
    run_dir, cells = small_000
    docs = docs_for(run_dir, cells, SEPARATED, "elapsed_s")
    found = verdicts(docs)
    for claim in ("000-ext2-fastest", "000-btrfs-slowest", "000-ext2-beats-btrfs", "000-ext4-beats-ext3"):
        assert found[claim][0] == "holds", found[claim]
    assert found["000-middle-order"][0] == "holds"
    assert "p = " in found["000-ext2-beats-btrfs"][1] and "3 vs 3 runs" in found["000-ext2-beats-btrfs"][1]
    text = "\n".join(seed.markdown(typed(docs)))
    # the published row the small input stands in for, both sides as "x the best"
    assert "| ext2 | 1,680 | 1.00x | 101 (3) | 1.00x |" in text
    assert "| btrfs | 28,667 | 17.06x | 305 (3) | 3.02x |" in text
    assert "Kendall's tau (20000000): 1.00 over 6 entries." in text
    assert "our workload.threen1.end = 300000 stands for the seed's 20000000" in text


def test_a_claim_that_does_not_hold(small_000: tuple[Path, list[matrix.MatrixCell]]) -> None:
    run_dir, cells = small_000
    values = dict(SEPARATED, **{"ext2-": [400.0, 402.0, 405.0]})  # ext2 now the slowest
    found = verdicts(docs_for(run_dir, cells, values, "elapsed_s"))
    assert found["000-ext2-beats-btrfs"][0] == "does not hold"
    assert found["000-ext2-fastest"][0] == "does not hold"
    assert found["000-btrfs-slowest"][0] == "does not hold"
    assert found["000-ext4-beats-ext3"][0] == "holds"
    tau_line = [x for x in seed.markdown(typed(docs_for(run_dir, cells, values, "elapsed_s"))) if "Kendall" in x]
    assert tau_line and "1.00" not in tau_line[0]


def test_a_difference_inside_the_noise_is_not_distinguishable(small_000: tuple[Path, list[matrix.MatrixCell]]) -> None:
    run_dir, cells = small_000
    values = dict(SEPARATED, **{"ext2-": [100.0, 330.0, 180.0], "btrfs-": [150.0, 320.0, 200.0]})
    found = verdicts(docs_for(run_dir, cells, values, "elapsed_s"))
    assert found["000-ext2-beats-btrfs"][0] == "not distinguishable"
    # ext2's median is still the lowest, but that does not make it "hold"
    assert found["000-ext2-fastest"][0] == "not distinguishable"


def test_missing_entries_are_not_measured(small_000: tuple[Path, list[matrix.MatrixCell]]) -> None:
    run_dir, cells = small_000
    values = {k: v for k, v in SEPARATED.items() if k in ("ext2-", "btrfs-")}
    found = verdicts(docs_for(run_dir, cells, values, "elapsed_s"))
    assert found["000-ext2-beats-btrfs"][0] == "holds"
    # "fastest of the six" needs the six
    assert found["000-ext2-fastest"] == ("not measured", "no passed runs for ext4, ext3, jfs, xfs in 20000000")
    assert found["000-ext4-beats-ext3"][0] == "not measured"


def test_a_factor_claim_needs_its_factor(tmp_path: Path) -> None:
    path = SEEDS / "gtm-3n1-tuning.yaml"
    run_dir = run_dir_for(tmp_path, path)
    cells = matrix.load(path, "small").cells
    ids = {
        (c.params["filesystem"], c.params["workload"]["threen1"]["workers"], c.params["gtm"]["global_buffers"]): c.id
        for c in cells
    }
    churn = {ids[("jfs", 4, 1000)]: [40.0, 41.0, 42.0], ids[("jfs", 8, 1000)]: [250.0, 255.0, 248.0]}
    churn[ids[("jfs", 8, 35000)]] = [30.0, 29.0, 31.0]
    found = verdicts(docs_for(run_dir, cells, churn, "elapsed_s"))
    assert found["002-w8-churns-jfs"][0] == "holds"  # 6x, needs >= 1.5
    assert found["002-big-pool-rescues-w8"][0] == "holds"
    assert found["002-w8-churns-ext4"][0] == "not measured"
    assert found["002-5000-helps-w8"][0] == "not measured"  # the small scale has no 5,000-buffer rows
    mild = dict(churn, **{ids[("jfs", 8, 1000)]: [48.0, 49.0, 50.0]})  # better, but by 1.2x, not 1.5x
    found = verdicts(docs_for(run_dir, cells, mild, "elapsed_s"))
    assert found["002-w8-churns-jfs"][0] == "does not hold"
    assert "needs >= 1.5" in found["002-w8-churns-jfs"][1]


def test_relative_speed_and_higher_is_better(tmp_path: Path) -> None:
    path = SEEDS / "fio-ext2-ext3.yaml"
    run_dir = run_dir_for(tmp_path, path)
    cells = matrix.load(path, "small").cells
    by = {}
    for c in cells:
        f = c.params["workload"]["fio"]
        by[(c.params["filesystem"], c.params["mount_options"], f["pattern"], f["jobs"])] = c.id
    values = {
        by[("ext3", "data=writeback", "randwrite", 1)]: [10.0, 11.0, 10.5],
        by[("ext3", "data=writeback", "randwrite", 4)]: [20.0, 21.0, 20.5],
        by[("ext3", "data=writeback", "randwrite", 8)]: [30.0, 31.0, 30.5],
    }
    docs = docs_for(run_dir, cells, values, "write_mib_s")
    found = verdicts(docs)
    assert found["001-more-processes"][0] == "holds"
    text = "\n".join(seed.markdown(typed(docs)))
    # relative to 1 process: published 203,742 / 93,932 = 217 %; ours 20.5 / 10.5 = 195 %
    assert "| 4 | 203,742 | 217% | 20.5 (3) | 195% |" in text


def test_section_in_markdown_and_html_reports(small_000: tuple[Path, list[matrix.MatrixCell]]) -> None:
    run_dir, cells = small_000
    docs = docs_for(run_dir, cells, SEPARATED, "elapsed_s")
    text = markdown.markdown(report.of_results(typed(docs)), "t")
    assert text.index("## Against the published results") < text.index("## Runs and verification")
    assert "| ours (elapsed_s: median, runs) |" in text  # our unit, which need not be the seed's
    page = html_page.html_report(report.of_results(typed(docs)), "t")
    assert "<h2>Against the published results</h2>" in page
    assert '<td class="holds">holds</td>' in page
    assert page.index("Against the published results") < page.index("Runs and verification")


def test_no_section_without_a_seed_matrix(tmp_path: Path) -> None:
    path = REPO / "matrix" / "quick.yaml"
    run_dir = run_dir_for(tmp_path, path)
    docs = docs_for(run_dir, matrix.load(path).cells, {"ext4-": [1.0, 2.0, 3.0]}, "elapsed_s")
    assert seed.blocks(typed(docs)) == []
    assert "Against the published results" not in markdown.markdown(report.of_results(typed(docs)), "t")


def test_unreadable_published_data_is_said_not_raised(
    small_000: tuple[Path, list[matrix.MatrixCell]], tmp_path: Path
) -> None:
    run_dir, cells = small_000
    docs = docs_for(run_dir, cells, SEPARATED, "elapsed_s")
    text = "\n".join(seed.markdown(typed(docs), tmp_path / "nowhere"))
    assert "The published data could not be read" in text


def test_normalise_and_kendall() -> None:
    assert claims.normalise({"a": 10.0, "b": 20.0}, "lower", "times_best", None) == {"a": 1.0, "b": 2.0}
    assert claims.normalise({"a": 10.0, "b": 20.0}, "higher", "times_best", None) == {"a": 2.0, "b": 1.0}
    assert claims.normalise({"a": 10.0, "b": 20.0}, "lower", "relative_to", "b") == {"a": 2.0, "b": 1.0}
    assert claims.normalise({"a": 10.0}, "lower", "relative_to", "b") == {}
    assert claims.kendall({"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 3, "c": 2})[0] == pytest.approx(1 / 3)
    tau, n = claims.kendall({"a": 1.0}, {"a": 1.0})
    assert math.isnan(tau) and n == 1


def test_every_claim_gets_a_verdict_for_every_seed_matrix(tmp_path: Path) -> None:
    data = published.load()
    for path in sorted(SEEDS.glob("*.yaml")):
        m = matrix.load(path, "small")
        run_dir = tmp_path / path.stem
        run_dir.mkdir()
        (run_dir / "matrix.json").write_text(json.dumps({"file": str(path), "cells": []}))
        docs = docs_for(run_dir, m.cells, {c.id: [1.0, 1.0, 1.0] for c in m.cells}, "elapsed_s")
        tables = {e["table"] for e in m.reproduces}
        expected = {c.id for c in data.claims if c.table in tables}
        found = verdicts(docs) if expected else {}
        assert set(found) == expected
        assert all(v in claims.VERDICTS for v, _ in found.values())
