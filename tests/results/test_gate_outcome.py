"""The gate's three verdicts (results/verdict/outcome.py): the PASS test against +threshold, NOT
DECIDED with what the pairs rule out, the looks' Pocock levels, and `compare`'s exit statuses."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from fsmatrix.bench import gate_designs
from fsmatrix.errors import UserError
from fsmatrix.results.verdict import outcome, race
from test_compare import invoke, samples, write_run


def _pairs(logs: np.ndarray) -> list[tuple[float, float]]:
    return [(10.0, 10.0 * math.exp(x)) for x in logs]


def test_the_pass_test_is_the_one_sided_t_test_against_the_threshold() -> None:
    logs = np.random.default_rng(1).normal(0.01, 0.05, 10)
    bound = outcome.bound_paired(_pairs(logs), "lower", 0.05, 0.05)
    assert bound is not None
    expected = sps.ttest_1samp(logs - math.log(1.05), 0.0, alternative="less").pvalue
    assert bound.p_value == pytest.approx(expected)
    # shown exactly when the one-sided upper bound lies below the threshold
    assert bound.shown == (bound.upper < 0.05)
    assert bound.upper == pytest.approx(math.expm1(logs.mean() + sps.t.isf(0.05, 9) * logs.std(ddof=1) / math.sqrt(10)))
    # a rate (higher is better): the same pairs read the other way
    higher = outcome.bound_paired([(h, b) for b, h in _pairs(logs)], "higher", 0.05, 0.05)
    assert higher is not None and higher.p_value == pytest.approx(expected)
    assert outcome.bound_paired(_pairs(logs[:2]), "lower", 0.05, 0.05) is None  # too few pairs


def test_the_unpaired_pass_test_is_welchs_on_the_logs() -> None:
    rng = np.random.default_rng(2)
    base, head = np.exp(rng.normal(0, 0.03, 6)), np.exp(rng.normal(0.0, 0.03, 7))
    bound = outcome.bound_samples(list(base), list(head), "lower", 0.05, 0.05)
    expected = sps.ttest_ind(np.log(head) - math.log(1.05), np.log(base), equal_var=False, alternative="less").pvalue
    assert bound is not None and bound.p_value == pytest.approx(expected)


def test_pass_holds_its_level_at_the_threshold() -> None:
    """A change exactly at +threshold is PASSed at most α of the time (seeded draws, 2000)."""
    rng = np.random.default_rng(3)
    passes = [
        outcome.bound_paired(_pairs(rng.normal(math.log(1.05), 0.1, 8)), "lower", 0.05, 0.05).shown  # type: ignore[union-attr]
        for _ in range(2000)
    ]
    assert 0.04 <= np.mean(passes) <= 0.06


def test_pairs_to_decide_grow_with_the_noise_and_the_advice_holds() -> None:
    quiet, noisy = (outcome.pairs_to_decide(sd, 0.0, 0.05, 0.05) for sd in (0.05, 0.13))
    assert quiet is not None and noisy is not None and noisy > 5 * quiet
    assert outcome.pairs_to_decide(0.1, 0.2, 0.05, 0.05) is not None  # far above: the FAIL side decides
    # at the advised n, the PASS test shows an equal pair below +5 % about 80 % of the time
    rng = np.random.default_rng(4)
    shown = [
        outcome.bound_paired(_pairs(rng.normal(0, 0.13, noisy)), "lower", 0.05, 0.05).shown  # type: ignore[union-attr]
        for _ in range(1000)
    ]
    assert 0.72 <= np.mean(shown) <= 0.88


def test_looks_parse_and_their_levels() -> None:
    assert outcome.Looks.parse("8:4:24").sizes == (8, 12, 16, 20, 24)
    assert outcome.Looks.parse("8:5:20").sizes == (8, 13, 18, 20)
    assert outcome.Looks.parse("8,10").sizes == (8, 10)
    for bad in ("8:0:24", "2:2:6", "8,8", "x", "12:4:8"):
        with pytest.raises(UserError, match="--looks"):
            outcome.Looks.parse(bad)
    looks = outcome.Looks.parse("8:4:24")
    assert 0.05 / 5 < looks.pass_level(0.05) < 0.05
    assert looks.pass_level(0.05) == race.sequential_level(0.05, looks.sizes)
    assert looks.fail_level(0.05) == 2 * race.sequential_level(0.025, looks.sizes)
    assert outcome.Looks((8,)).pass_level(0.05) == 0.05  # one look: the fixed gate's level


def test_the_sequential_design_keeps_its_errors_in_simulation() -> None:
    """The designs on drawn pairs: false FAIL on A/A and false PASS at +threshold stay near or below α,
    and the sequential design decides more than the fixed one at a spread of 14 %."""
    fixed, sequential = gate_designs.designs(8, 4, 24, 8)
    found = gate_designs.simulate((fixed, sequential), [0.0, 0.05, 0.2], 0.14, 0.05, 300, seed=1)
    for design in (fixed, sequential):
        assert np.mean(found[(design.name, 0.0)].hits(outcome.FAIL)) <= 0.02
        assert np.mean(found[(design.name, 0.05)].hits(outcome.PASS)) <= 0.08
        assert not any(found[(design.name, 0.2)].hits(outcome.PASS))
    decided = {d.name: np.mean(found[(d.name, 0.2)].hits(outcome.FAIL)) for d in (fixed, sequential)}
    assert decided[sequential.name] > decided[fixed.name]
    assert max(found[(sequential.name, 0.0)].pairs) == 24  # A/A never FAILs: at most the last look's pairs


def test_run_design_stops_at_the_first_decision_and_confirms_a_fail() -> None:
    design = gate_designs.Design("seq", (3, 5, 7), 4)
    answers = {3: outcome.NOT_DECIDED, 5: outcome.PASS, 7: outcome.FAIL}
    assert gate_designs.run_design(design, answers.__getitem__, lambda n: outcome.FAIL, 7) == (outcome.PASS, 5)
    answers[5] = outcome.FAIL
    assert gate_designs.run_design(design, answers.__getitem__, lambda n: outcome.NOT_DECIDED, 7) == (
        outcome.NOT_DECIDED,
        9,
    )
    answers[5] = outcome.NOT_DECIDED
    assert gate_designs.run_design(design, answers.__getitem__, lambda n: outcome.FAIL, 5) == (outcome.NOT_DECIDED, 5)


def _paired_runs(tmp_path: Path, effect: float, cv: float, n: int = 8) -> tuple[Path, Path]:
    base = write_run(tmp_path, "base", samples(10.0, n=n, seed=1, cv=cv))
    head = write_run(tmp_path, "head", [v * (1 + effect) for v in samples(10.0, n=n, seed=2, cv=cv)], cpu=0.0011)
    return base, head


@pytest.mark.parametrize(
    ("effect", "cv", "verdict", "status"),
    [(0.0, 0.005, "PASS", 0), (0.03, 0.1, "NOT DECIDED", 3), (0.4, 0.01, "FAIL", 1)],
)
def test_compare_says_pass_fail_or_not_decided(
    tmp_path: Path, effect: float, cv: float, verdict: str, status: int
) -> None:
    base, head = _paired_runs(tmp_path, effect, cv)
    args = ["compare", str(base), str(head), "--paired", "--fail-on-regression", "5%"]
    doc = json.loads(invoke(*args, "--format", "json").output)
    assert doc["verdict"] == verdict and doc["exit_status"] == status
    gated = [r for r in doc["rows"] if r["gated"]]
    assert gated and all("bound" in r for r in gated)
    assert invoke(*args).exit_code == status  # the table
    out = invoke(*args, "--format", "md")
    assert out.exit_code == status
    if verdict == "NOT DECIDED":
        assert "gate NOT DECIDED" in out.output and "rule out only regressions above" in out.output
        assert "at the measured pair spread of" in out.output and "pairs would decide" in out.output
        assert invoke(*args, "--not-decided", "fail").exit_code == 1
        assert invoke(*args, "--not-decided", "pass").exit_code == 0
    if verdict == "PASS":
        assert "gate PASSED: every gated metric shown not worse than its threshold" in out.output


def test_pass_needs_every_gated_metric(tmp_path: Path) -> None:
    """Time shown below +5 %, the run's CPU-seconds not (noisy): NOT DECIDED, naming cpu_busy_s only."""
    base = write_run(tmp_path, "base", samples(10.0, n=8, seed=1, cv=0.005), cpu=1.0)
    head_values = samples(10.0, n=8, seed=2, cv=0.005)
    root = tmp_path / "h"
    head = write_run(root, "head", head_values, cpu=1.0)
    for i, path in enumerate(sorted((head).rglob("r*.json"))):
        doc = json.loads(path.read_text())
        doc["metrics"]["cpu_busy_s"] = [0.8, 1.3, 0.9, 1.25, 0.85, 1.2, 0.95, 1.3][i]
        path.write_text(json.dumps(doc))
    out = invoke("compare", str(base), str(head), "--paired", "--fail-on-regression", "5%", "--format", "json")
    doc = json.loads(out.output)
    shown = {r["metric"]: r["bound"]["shown"] for r in doc["rows"] if r["gated"]}
    assert shown == {"elapsed_s": True, "cpu_busy_s": False, "device_write_bytes_per_op": True}
    assert doc["verdict"] == "NOT DECIDED"


def test_looks_make_each_test_stricter_and_are_checked(tmp_path: Path) -> None:
    base, head = _paired_runs(tmp_path, 0.0, 0.005)
    args = ["compare", str(base), str(head), "--paired", "--fail-on-regression", "5%", "--format", "json"]
    doc = json.loads(invoke(*args, "--looks", "8:4:24").output)
    looks = outcome.Looks.parse("8:4:24")
    assert doc["looks"] == [8, 12, 16, 20, 24] and doc["pass_level"] == looks.pass_level(0.05)
    assert doc["fail_level"] == looks.fail_level(0.05)
    assert all(r["bound"]["level"] == doc["pass_level"] for r in doc["rows"] if r["gated"])
    bad = invoke(*args, "--looks", "8:0:4")
    assert bad.exit_code == 2 and "--looks '8:0:4'" in bad.output and "Traceback" not in bad.output
    alone = invoke("compare", str(base), str(head), "--looks", "8:4:24")
    assert alone.exit_code == 2 and "give --fail-on-regression" in alone.output
