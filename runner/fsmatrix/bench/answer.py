"""What the answer's words are worth: the error rates of its rule, simulated with its own decision
code (``verdict/groups.decide`` and ``welch.intervals``, on arrays of many groups at once).

``python -m fsmatrix.bench.answer [--trials N] [--seed S] [--format md|json]``: for every design of
k ∈ {2, 4, 8} configurations × n ∈ {3, 5, 10} runs each × CV ∈ {3, 8, 15} % (log-normal noise, σ of
the logs sqrt(ln(1 + CV²))), two seeded sets of trials:

- *all equal*: ``family_error`` is the share of trials in which any configuration is called worse
  (which a single best named needs);
- *one 20 % worse* (the last configuration's values 1.2× for a time): ``power`` is the share in
  which it is called worse, ``false_equivalent`` the share in which it and another are called
  equivalent within ±δ (δ = 5 %);
- ``coverage``: the share of trials, of both sets, in which every printed interval — each
  configuration's against the leader and against the baseline (the first configuration) — holds
  its true ratio.

Trials: ``--trials`` for k = 4 (default 10,000), a fifth of it elsewhere (2,000). Each rate comes
with its exact 95 % interval (Clopper-Pearson). The targets docs/answer.md states: family error <=
5.5 %, coverage >= 94 %, false equivalent <= 5 % in every design.

Then **all pairs against comparisons with the best** (``--mcb-only``: this table alone): both rules
forced on the same seeded groups of k ∈ {4, 8, 12, 16, 32} configurations (``MCB_KS``) × 3 runs ×
CV ∈ {3, 8, 15} %, a fifth of ``--trials`` each: *family error* (all equal: any configuration called
worse), *two best tied* (two equal configurations 50 % ahead of the others, equal among
themselves: either called worse, MCB's harder case), *best named* (one configuration 20 %, resp.
50 %, faster than all the others: the share of trials naming it best) and *others worse* (at 50 %:
the share of the others called worse); with each rule's critical t at 3 runs (Welch's df = 4 when
the variances are equal).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from fsmatrix.errors import exit_with
from fsmatrix.results.verdict import groups, stats, welch

KS = (2, 4, 8)
NS = (3, 5, 10)
CVS = (0.03, 0.08, 0.15)
TRIALS = 10_000  # for k = 4; a fifth elsewhere
WORSE_BY = 0.2  # the worse configuration of the second set
AHEAD = 0.5  # all pairs against MCB: the lead of a clearly better configuration


@dataclass(frozen=True)
class Row:
    k: int
    n: int
    cv: float
    trials: int
    family_error: float
    coverage: float
    false_equivalent: float
    power: float
    family_error_ci: tuple[float, float]
    coverage_ci: tuple[float, float]


def _trials(
    rng: np.random.Generator, trials: int, k: int, n: int, sigma: float, shift: np.ndarray
) -> tuple[groups.Decisions, np.ndarray, np.ndarray]:
    """``trials`` groups of k configurations of n runs (log values ~ N(shift, σ)): the rule's decisions,
    and each configuration's mean and variance of logs."""
    logs = rng.normal(0.0, sigma, size=(trials, k, n)) + shift[None, :, None]
    means, variances = logs.mean(axis=2), logs.var(axis=2, ddof=1)
    return groups.decide(means, variances, np.full(k, n), delta=groups.DELTA), means, variances


def _covered(d: groups.Decisions, means: np.ndarray, variances: np.ndarray, n: int, shift: np.ndarray) -> np.ndarray:
    """Per trial: every interval against the leader and against configuration 0 holds its true difference."""
    trials, k = means.shape
    truth_vs_leader = shift[None, :] - shift[d.leader][:, None]
    against_leader = (d.low <= truth_vs_leader) & (truth_vs_leader <= d.high)
    counts = np.full((trials, k), float(n))
    level = stats.ALPHA / groups.family_size(k)
    low, high, _ = welch.intervals(means - means[:, :1], variances[:, :1], counts[:, :1], variances, counts, level)
    truth_vs_base = shift[None, :] - shift[0]
    against_base = (low <= truth_vs_base) & (truth_vs_base <= high)
    ok: np.ndarray = against_leader.all(axis=1) & against_base.all(axis=1)
    return ok


def design(k: int, n: int, cv: float, trials: int, seed: int) -> Row:
    rng = np.random.default_rng([seed, k, n, round(cv * 1000)])
    sigma = math.sqrt(math.log1p(cv**2))
    equal = np.zeros(k)
    d0, m0, v0 = _trials(rng, trials, k, n, sigma, equal)
    family_errors = int(np.count_nonzero((d0.status == groups.WORSE).any(axis=1)))
    worse = np.zeros(k)
    worse[-1] = math.log1p(WORSE_BY)
    d1, m1, v1 = _trials(rng, trials, k, n, sigma, worse)
    last = k - 1
    power = int(np.count_nonzero(d1.status[:, last] == groups.WORSE))
    # A false equivalence pairs the worse configuration with another: it is called equivalent to the
    # leader, or it is the leader and another is called equivalent to it.
    it_equivalent = d1.status[:, last] == groups.EQUIVALENT
    it_leads = d1.leader == last
    others_equivalent = (d1.status[:, :last] == groups.EQUIVALENT).any(axis=1)
    false_equivalent = int(np.count_nonzero(it_equivalent | (it_leads & others_equivalent)))
    covered = int(np.count_nonzero(_covered(d0, m0, v0, n, equal)) + np.count_nonzero(_covered(d1, m1, v1, n, worse)))
    return Row(
        k,
        n,
        cv,
        trials,
        family_errors / trials,
        covered / (2 * trials),
        false_equivalent / trials,
        power / trials,
        stats.clopper_pearson(family_errors, trials),
        stats.clopper_pearson(covered, 2 * trials),
    )


MCB_KS = (4, 8, 12, 16, 32)
MCB_N = 3


@dataclass(frozen=True)
class RuleRow:
    """One rule on one design of the all-pairs-against-MCB table."""

    k: int
    n: int
    cv: float
    rule: str
    trials: int
    critical_t: float  # at n runs each, equal variances: Welch's df = 2(n - 1)
    family_error: float  # all equal: any configuration called worse
    family_error_ci: tuple[float, float]
    tied_error: float  # two equal best 50 % ahead of the others: either called worse
    best_named_20: float  # one configuration 20 % better than the others: the share naming it best
    best_named_50: float  # 50 % better
    called_worse_50: float  # there: the share of the other configurations called worse


def rule_design(k: int, n: int, cv: float, trials: int, seed: int) -> list[RuleRow]:
    """Both rules on the same seeded groups: all equal; two equal best, 50 % ahead of the others; one
    best by 20 % and by 50 %."""
    rng = np.random.default_rng([seed, k, n, round(cv * 1000), 1])
    sigma = math.sqrt(math.log1p(cv**2))

    def groups_of(behind: int, by: float) -> np.ndarray:
        """The first ``k - behind`` configurations equal, the rest ``by`` slower."""
        logs = rng.normal(0.0, sigma, size=(trials, k, n))
        logs[:, k - behind :, :] += math.log1p(by)
        return logs

    designs = {
        "equal": groups_of(0, 0.0),
        "two best": groups_of(k - 2, AHEAD),
        "20 %": groups_of(k - 1, WORSE_BY),
        "50 %": groups_of(k - 1, AHEAD),
    }
    rows = []
    for rule in ("pairs", "mcb"):
        status = {
            name: groups.decide(x.mean(axis=2), x.var(axis=2, ddof=1), np.full(k, n), rule=rule).status
            for name, x in designs.items()
        }
        errors = int(np.count_nonzero((status["equal"] == groups.WORSE).any(axis=1)))
        tied = int(np.count_nonzero((status["two best"][:, :2] == groups.WORSE).any(axis=1)))
        level = stats.ALPHA / groups.family_of(k, rule)
        rows.append(
            RuleRow(
                k,
                n,
                cv,
                rule,
                trials,
                float(sps.t.isf(level / 2, 2 * (n - 1))),
                errors / trials,
                stats.clopper_pearson(errors, trials),
                tied / trials,
                float(np.mean(status["20 %"][:, 0] == groups.BEST)),
                float(np.mean(status["50 %"][:, 0] == groups.BEST)),
                float(np.mean(status["50 %"][:, 1:] == groups.WORSE)),
            )
        )
    return rows


def compare_rules(trials: int = TRIALS // 5, seed: int = 0) -> list[RuleRow]:
    return [r for k, cv in itertools.product(MCB_KS, CVS) for r in rule_design(k, MCB_N, cv, trials, seed)]


def rules_markdown(rows: list[RuleRow]) -> str:
    lines = [
        "| k | n | CV | rule | trials | critical t | family error, all equal [95 % CI] | two best tied: "
        "either worse | best named: 20 % better | 50 % better | others worse (50 %) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        fe = r.family_error_ci
        lines.append(
            f"| {r.k} | {r.n} | {r.cv:.0%} | {r.rule} | {r.trials:,} | {r.critical_t:.1f} | "
            f"{_pct(r.family_error)} [{_pct(fe[0])}, {_pct(fe[1])}] | {_pct(r.tied_error)} | "
            f"{_pct(r.best_named_20)} | {_pct(r.best_named_50)} | {_pct(r.called_worse_50)} |"
        )
    return "\n".join(lines) + "\n"


def simulate(trials: int = TRIALS, seed: int = 0) -> list[Row]:
    return [
        design(k, n, cv, trials if k == 4 else max(trials // 5, 1), seed) for k, n, cv in itertools.product(KS, NS, CVS)
    ]


def to_json(rows: list[Row], rules: list[RuleRow] | None = None) -> dict[str, Any]:
    return {"rows": [asdict(r) for r in rows], "rules": [asdict(r) for r in rules or []]}


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def markdown(rows: list[Row]) -> str:
    lines = [
        "| k | n | CV | trials | family error [95 % CI] | coverage [95 % CI] | false equivalent | power (20 % worse) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        fe, cov = r.family_error_ci, r.coverage_ci
        lines.append(
            f"| {r.k} | {r.n} | {r.cv:.0%} | {r.trials:,} | {_pct(r.family_error)} [{_pct(fe[0])}, {_pct(fe[1])}] | "
            f"{_pct(r.coverage)} [{_pct(cov[0])}, {_pct(cov[1])}] | {_pct(r.false_equivalent)} | {_pct(r.power)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsmatrix.bench.answer", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=TRIALS, help="trials per design for k = 4 (a fifth elsewhere)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", choices=("md", "json"), default="md")
    parser.add_argument("--mcb-only", action="store_true", help="only the table of all pairs against MCB")
    args = parser.parse_args(argv)
    if args.trials < 5:
        print(f"fsmatrix.bench.answer: error: --trials {args.trials}: at least 5", file=sys.stderr)
        return 2
    rows = [] if args.mcb_only else simulate(args.trials, args.seed)
    rules = compare_rules(max(args.trials // 5, 1), args.seed)
    if args.format == "json":
        print(json.dumps(to_json(rows, rules), indent=1))
    else:
        print((markdown(rows) + "\n" if rows else "") + rules_markdown(rules), end="")
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.answer")
