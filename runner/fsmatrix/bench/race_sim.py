"""The default race against fixed repeats, by simulation: what running until decided buys and costs.
``python -m fsmatrix.bench.race_sim [--trials N] [--seed S] [--max-repeats R] [--format md|json]``

For every design of k ∈ {2, 3, 4} configurations × CV ∈ {3, 8, 15} % (log-normal noise, σ of the logs
sqrt(ln(1 + CV²))) × true difference Δ ∈ {0, 5, 10, 20} %, seeded groups shaped like the stored ones
(``matrix/bench/race-*.yaml``: a best cell and the others each Δ behind the one before, a ladder
1, 1 + Δ, (1 + Δ)², ... of a time, lower is better) are decided two ways on the same runs:

- **the race** ``fsmatrix run`` runs by default: rounds of every cell still in it, and after each
  round ``results.verdict.race.race_look`` (the runner's own function; ``race_step`` under it) with
  min 3 and max ``--max-repeats`` (default 10, the default race's) repeats and δ 5 %; a retired or
  equivalent cell gets no more runs; it stops when the group is decided or at the maximum (a time
  budget stops nothing here). Its words are the answer's for a raced group (``store.STATUS_OF_ACTION``):
  retired → worse, equivalent → equivalent, a best with every other decided → best, the leader and
  the rest of an undecided group → not separated.
- **fixed repeats** of 3, 5 and 10 runs a cell (the first n of the same runs), judged by the answer's
  fixed-sample rule, ``results.verdict.groups.decide`` (``compare_group`` on arrays): Welch's
  intervals at 1 - α/m, read as best, equivalent, not separated or worse.

Reported per design and rule: the mean runs a group used (fixed: k·n), the share of groups
**decided** (no configuration left not separated: every pair best, equivalent or worse) and the
share with a **wrong decision** (with its exact 95 % Clopper-Pearson interval): a configuration
called worse than the one it was judged against (fixed: the leader; the race: the best at the look
that retired it) while it is truly not worse than it, or called equivalent to it while it is truly
not within ±δ (the boundary, exactly δ apart, counts as not within). Both rules promise at most α =
5 % family-wise per group, with the same words: the race retires a cell shown worse than the best
(``racing.RETIRE_MARGIN`` 0; races before 2026-12-03 retired only beyond δ, a stronger claim that
decided far fewer groups).

``--trials`` groups per design (default 400: the 36 designs take about two minutes on one core of the
2-core build machine, the race's looks most of it). Deterministic for a seed.
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

from fsmatrix.errors import exit_with
from fsmatrix.matrix import RaceSettings
from fsmatrix.results.store.records import Left
from fsmatrix.results.verdict import groups, race, stats

KS = (2, 3, 4)
CVS = (0.03, 0.08, 0.15)
DIFFS = (0.0, 0.05, 0.10, 0.20)
FIXED = (3, 5, 10)
TRIALS = 400
DECIDABLE = 0.5  # a design counts for the summary when some rule decides at least this share of its groups
MAX_REPEATS = 10  # the default race's (matrix.RACE_MAX_REPEATS)
DELTA = groups.DELTA
ALPHA = stats.ALPHA


@dataclass(frozen=True)
class Outcome:
    """One rule over one design's trials."""

    runs: float  # mean runs a group used
    decided: float  # share of groups with nothing left not separated
    wrong: float  # share of groups with a wrong "worse" or "equivalent"
    wrong_ci: tuple[float, float]


@dataclass(frozen=True)
class Row:
    k: int
    cv: float
    diff: float
    trials: int
    race: Outcome
    fixed: dict[int, Outcome]  # runs a cell -> the fixed-sample rule's outcome


def true_logs(k: int, diff: float) -> np.ndarray:
    """Each configuration's true mean log value: a ladder, configuration j is (1 + Δ)^j times the first."""
    return np.arange(k) * math.log1p(diff)


def wrong_claim(claim: str, mine: float, theirs: float, bound: float) -> bool:
    """Whether "``mine`` is worse than / equivalent to ``theirs``" (true mean logs, larger is worse) is false."""
    if claim == "worse":
        return mine <= theirs
    return abs(mine - theirs) >= bound - 1e-12


def race_trial(values: np.ndarray, mu: np.ndarray, settings: RaceSettings) -> tuple[int, bool, bool]:
    """One raced group (``values``: k cells × max repeats, in run order): its runs used, whether it was
    decided, and whether it made a wrong decision."""
    names = [f"c{j}" for j in range(values.shape[0])]
    drawn: dict[str, list[float | None]] = {c: [] for c in names}
    left: dict[str, Left] = {}
    claims: dict[str, tuple[str, str]] = {}  # cell -> (its final claim, the cell it was judged against)
    used = 0
    for r in range(1, settings.max_repeats + 1):
        for j, c in enumerate(names):
            if c not in left:
                drawn[c].append(float(values[j, len(drawn[c])]))
                used += 1
        step, leaving, still_open = race.race_look(drawn, "lower", left, r, settings, ALPHA)
        for c, entry in leaving.items():
            if entry.action in ("retired", "equivalent") and step.best is not None:
                claims[c] = ("worse" if entry.action == "retired" else "equivalent", step.best)
        left.update(leaving)
        if not still_open:
            break
    decided = not any(e.status == "not separated" for e in left.values())  # none remained undecided
    bound = math.log1p(settings.delta)
    index = {c: j for j, c in enumerate(names)}
    wrong = any(wrong_claim(claim, mu[index[c]], mu[index[ref]], bound) for c, (claim, ref) in claims.items())
    return used, decided, wrong


def fixed_rule(
    logs: np.ndarray, mu: np.ndarray, n: int, *, alpha: float = ALPHA, delta: float = DELTA
) -> tuple[np.ndarray, np.ndarray]:
    """The answer's fixed-sample rule on the first ``n`` runs of every trial (``logs``: trials × k ×
    runs): per trial, decided (nothing not separated) and wrong (a wrong worse or equivalent)."""
    first = logs[:, :, :n]
    counts = np.full(logs.shape[1], n)
    d = groups.decide(first.mean(axis=2), first.var(axis=2, ddof=1), counts, alpha=alpha, delta=delta)
    rows = np.arange(logs.shape[0])
    versus = mu[None, :] - mu[d.leader][:, None]  # each configuration's truth against its trial's leader
    wrong_worse = (d.status == groups.WORSE) & (versus <= 0)
    others = np.ones_like(d.status, dtype=bool)
    others[rows, d.leader] = False
    wrong_equal = (d.status == groups.EQUIVALENT) & others & (np.abs(versus) >= math.log1p(delta) - 1e-12)
    decided = ~(d.status == groups.NOT_SEPARATED).any(axis=1)
    wrong = (wrong_worse | wrong_equal).any(axis=1)
    return decided, wrong


def _outcome(runs: float, decided: np.ndarray, wrong: np.ndarray) -> Outcome:
    trials = decided.size
    w = int(np.count_nonzero(wrong))
    return Outcome(runs, float(np.count_nonzero(decided)) / trials, w / trials, stats.clopper_pearson(w, trials))


def design(k: int, cv: float, diff: float, trials: int, seed: int = 0, max_repeats: int = MAX_REPEATS) -> Row:
    """One design's trials, raced and at fixed repeats, on the same seeded runs."""
    rng = np.random.default_rng([seed, k, round(cv * 1000), round(diff * 1000)])
    sigma = math.sqrt(math.log1p(cv**2))
    mu = true_logs(k, diff)
    width = max(max_repeats, *FIXED)
    logs = rng.normal(0.0, sigma, size=(trials, k, width)) + mu[None, :, None]
    values = 10.0 * np.exp(logs)  # a time of about 10 s; the scale changes nothing
    settings = RaceSettings(min_repeats=stats.MIN_SAMPLES, max_repeats=max_repeats, delta=DELTA)
    raced = [race_trial(values[t, :, :max_repeats], mu, settings) for t in range(trials)]
    used = np.array([u for u, _, _ in raced], dtype=float)
    race_outcome = _outcome(float(used.mean()), np.array([d for _, d, _ in raced]), np.array([w for _, _, w in raced]))
    fixed = {}
    for n in FIXED:
        decided, wrong = fixed_rule(logs, mu, n)
        fixed[n] = _outcome(float(k * n), decided, wrong)
    return Row(k, cv, diff, trials, race_outcome, fixed)


def simulate(trials: int = TRIALS, seed: int = 0, max_repeats: int = MAX_REPEATS) -> list[Row]:
    return [design(k, cv, diff, trials, seed, max_repeats) for k, cv, diff in itertools.product(KS, CVS, DIFFS)]


def to_json(rows: list[Row], max_repeats: int = MAX_REPEATS) -> dict[str, Any]:
    return {
        "alpha": ALPHA,
        "delta": DELTA,
        "race": {"min_repeats": stats.MIN_SAMPLES, "max_repeats": max_repeats},
        "fixed": list(FIXED),
        "rows": [{**asdict(r), "fixed": {str(n): asdict(o) for n, o in r.fixed.items()}} for r in rows],
    }


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def per_decided(o: Outcome) -> float:
    """Runs per decided group: the runs a group used over the share of groups decided (inf: none)."""
    return o.runs / o.decided if o.decided else math.inf


def best_fixed(r: Row) -> tuple[int, float]:
    """The fixed design with the fewest runs per decided group, and that figure."""
    n = min(r.fixed, key=lambda m: per_decided(r.fixed[m]))
    return n, per_decided(r.fixed[n])


def _per(x: float) -> str:
    return "-" if math.isinf(x) else f"{x:.1f}"


def markdown(rows: list[Row], max_repeats: int = MAX_REPEATS) -> str:
    head = f"| k | CV | Δ | race (3..{max_repeats}): runs | decided | runs per decided | wrong [95 % CI] |"
    head += "".join(f" {n} runs ({n}·k): decided | wrong |" for n in FIXED)
    head += " best fixed: runs per decided |"
    lines = [head, "|" + "---|" * (7 + 2 * len(FIXED) + 1)]
    for r in rows:
        low, high = r.race.wrong_ci
        line = (
            f"| {r.k} | {r.cv:.0%} | {r.diff:.0%} | {r.race.runs:.1f} | {_pct(r.race.decided)} | "
            f"{_per(per_decided(r.race))} | {_pct(r.race.wrong)} [{_pct(low)}, {_pct(high)}] |"
        )
        line += "".join(f" {_pct(o.decided)} | {_pct(o.wrong)} |" for o in r.fixed.values())
        n, fixed = best_fixed(r)
        line += f" {_per(fixed)} ({n}) |" if not math.isinf(fixed) else " - |"
        lines.append(line)
    worst = max(rows, key=lambda r: r.race.wrong)
    fixed_worst = max(o.wrong for r in rows for o in r.fixed.values())
    decidable = [r for r in rows if max(r.race.decided, *(o.decided for o in r.fixed.values())) >= DECIDABLE]
    fewer = sum(per_decided(r.race) < best_fixed(r)[1] for r in decidable)
    against = []
    for n in FIXED:  # each fixed design as a rule chosen in advance
        rows_n = [r for r in rows if max(r.race.decided, r.fixed[n].decided) >= DECIDABLE]
        wins = sum(per_decided(r.race) < per_decided(r.fixed[n]) for r in rows_n)
        against.append(f"{n} repeats in {wins} of {len(rows_n)}")
    lines += [
        "",
        f"{rows[0].trials:,} groups a design; α = {ALPHA:g}, δ = {DELTA:.0%}. Wrong decisions at most "
        f"{_pct(worst.race.wrong)} for the race (k = {worst.k}, CV {worst.cv:.0%}, Δ {worst.diff:.0%}), "
        f"{_pct(fixed_worst)} for fixed repeats. Runs per decided group, over the designs where the race or the "
        f"fixed design decides at least {DECIDABLE:.0%} of the groups: the race needs fewer than "
        f"{', '.join(against)}; fewer than the best fixed design chosen with hindsight for each design in {fewer} "
        f"of {len(decidable)}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsmatrix.bench.race_sim", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=TRIALS, help="groups per design")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-repeats", type=int, default=MAX_REPEATS, help="the race's last round (3 to 10)")
    parser.add_argument("--format", choices=("md", "json"), default="md")
    args = parser.parse_args(argv)
    if args.trials < 1:
        print(f"fsmatrix.bench.race_sim: error: --trials {args.trials}: at least 1", file=sys.stderr)
        return 2
    if not stats.MIN_SAMPLES <= args.max_repeats <= max(FIXED):
        print(f"fsmatrix.bench.race_sim: error: --max-repeats {args.max_repeats}: 3 to 10", file=sys.stderr)
        return 2
    rows = simulate(args.trials, args.seed, args.max_repeats)
    text = (
        json.dumps(to_json(rows, args.max_repeats), indent=1)
        if args.format == "json"
        else markdown(rows, args.max_repeats)
    )
    print(text, end="" if args.format == "md" else "\n")
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.race_sim")
