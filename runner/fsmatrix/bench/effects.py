"""The effects model by simulation: family error and power on designs with known effects.
``python -m fsmatrix.bench.effects [--trials N] [--seed S] [--repeats R] [--cov HC3] [--format md|json]``

Designs over five two-level settings (six for the resolution IV one): the full cross (32 cells), the
half fraction (resolution V, 16), a 2^(6−2) (resolution IV, 16) and a 2^(5−2) (resolution III, 8),
each cell run 3 times (``--repeats``; the round a block, with a small drift per round). True effects on the logs,
additive plus interactions: setting 1 at 2δ (ratio (1+δ)²), setting 2 at −2δ, setting 3 at δ/2, the
rest 0; interactions 1×2 at δ and 3×4 at δ/2; the metric log-normal around them with a CV of 3, 8 or
15 % in every cell, or mixed (each cell's CV drawn from 3, 8 and 15 %). Each trial is fitted by
``results.verdict.effects.fit`` (the report's own function) and judged:

- **family error**: any estimated term whose interval misses its true value. For an aliased term the
  true value is its chain's (the sum of the true effects of the terms the design cannot tell apart:
  resolution III's setting = the setting plus the interactions aliased with it). Promised: at most α.
- **power**: the two settings of size 2δ found (the interval excludes 1, on the right side) and
  called *matters* (wholly beyond ±δ). The issue's target: found at least 90 % of the time at
  resolution IV and up.

Runs nothing but numpy and the model; deterministic for a seed.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import asdict, dataclass

from fsmatrix.errors import exit_with
from fsmatrix.matrix import design
from fsmatrix.results.verdict import effects

ALPHA, DELTA = 0.05, 0.05
CVS: dict[str, tuple[float, ...]] = {"3 %": (0.03,), "8 %": (0.08,), "15 %": (0.15,), "mixed": (0.03, 0.08, 0.15)}
REPEATS = 3
DRIFT = 0.01  # σ of a round's shift on the logs


@dataclass(frozen=True)
class Plan:
    name: str
    factors: int
    spec: design.DesignSpec | None  # None: the full cross


PLANS = (
    Plan("full cross 2^5", 5, None),
    Plan("half 2^(5−1), res V", 5, design.DesignSpec("fractional", resolution=5)),
    Plan("2^(6−2), res IV", 6, design.DesignSpec("fractional", resolution=4)),
    Plan("2^(5−2), res III", 5, design.DesignSpec("fractional", runs=8)),
)


def truth(k: int) -> dict[int, float]:
    """ln ratio (high against low) of each term, bit masks as design.py's: 2β of the model."""
    big = 2 * math.log1p(DELTA)
    return {1: big, 2: -big, 4: math.log1p(DELTA) / 2, 1 | 2: math.log1p(DELTA), 4 | 8: math.log1p(DELTA) / 4}


def levels_of(plan: Plan) -> tuple[list[tuple[int, ...]], design.Fraction | None]:
    names = [f"s{i + 1}" for i in range(plan.factors)]
    if plan.spec is None:
        rows = [tuple((i >> (plan.factors - 1 - j)) & 1 for j in range(plan.factors)) for i in range(2**plan.factors)]
        return rows, None

    def fail(message: str, line: int | None) -> Exception:
        return ValueError(message)

    made = design.fraction(plan.spec, names, None, fail)
    return made.levels(), made


def true_value(
    term: tuple[int, ...], aliased: tuple[tuple[int, ...], ...], effects_true: dict[int, float], row: tuple[int, ...]
) -> float:
    """The chain's true ln ratio: the term's plus, for each term aliased with it, that one's times the
    sign of their product's column (constant over a regular fraction's cells: read off one ``row``)."""
    mask = sum(1 << i for i in term)
    value = effects_true.get(mask, 0.0)
    for a in aliased:
        other = sum(1 << i for i in a)
        sign = math.prod(1 if row[i] else -1 for i in range(len(row)) if (mask ^ other) >> i & 1)
        value += sign * effects_true.get(other, 0.0)
    return value


def trial(
    plan: Plan, cvs: tuple[float, ...], rnd: random.Random, cov: str, repeats: int = REPEATS
) -> tuple[bool, int, int, int] | None:
    rows, _ = LEVELS[plan.name]
    k = plan.factors
    true = truth(k)
    runs = []
    drift = [rnd.gauss(0, DRIFT) for _ in range(repeats)]
    for cell, bits in enumerate(rows):
        x = [1 if b else -1 for b in bits]
        mean = sum(v / 2 * math.prod(x[i] for i in range(k) if mask >> i & 1) for mask, v in true.items())
        sigma = math.sqrt(math.log1p(rnd.choice(cvs) ** 2))
        for r in range(repeats):
            runs.append(effects.Run(str(cell), tuple(x), r + 1, math.exp(mean + drift[r] + rnd.gauss(0, sigma))))
    fitted = effects.fit(runs, [f"s{i + 1}" for i in range(k)], ALPHA, DELTA, cov)
    if isinstance(fitted, str):
        return None
    terms, *_ = fitted
    wrong = False
    found = matters = 0
    for t in terms:
        expected = true_value(t.factors, t.aliased_with, true, rows[0])
        if not math.log(t.ci_low) <= expected <= math.log(t.ci_high):
            wrong = True
        if t.factors in ((0,), (1,)):
            right_side = t.ci_low > 1 if t.factors == (0,) else t.ci_high < 1
            found += right_side
            matters += right_side and t.words == "matters"
    return wrong, found, matters, 2


@dataclass(frozen=True)
class Row:
    """One design at one CV: the trials fitted, the family error, the 2δ settings found and called matters."""

    design: str
    cv: str
    trials: int
    family_error: float | None
    found_2delta: float | None
    matters_2delta: float | None


LEVELS: dict[str, tuple[list[tuple[int, ...]], design.Fraction | None]] = {}


def simulate(trials: int, seed: int, cov: str, repeats: int = REPEATS) -> list[Row]:
    rows: list[Row] = []
    for plan in PLANS:
        LEVELS[plan.name] = levels_of(plan)
        for cv_name, cvs in CVS.items():
            rnd = random.Random(f"{seed}-{plan.name}-{cv_name}")
            wrong = found = matters = big = fitted = 0
            for _ in range(trials):
                one = trial(plan, cvs, rnd, cov, repeats)
                if one is None:
                    continue
                fitted += 1
                wrong += one[0]
                found += one[1]
                matters += one[2]
                big += one[3]
            rows.append(
                Row(
                    plan.name,
                    cv_name,
                    fitted,
                    wrong / fitted if fitted else None,
                    found / big if big else None,
                    matters / big if big else None,
                )
            )
    return rows


def markdown(rows: list[Row], trials: int, seed: int, cov: str, repeats: int = REPEATS) -> str:
    lines = [
        f"effects model ({cov}, Bonferroni at α {ALPHA:g}), {repeats} repeats, δ {DELTA:.0%}: "
        f"{trials} trials a row, seed {seed}",
        "",
        "| design | CV | family error | 2δ found | 2δ matters |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.design} | {r.cv} | {r.family_error or 0:.1%} | {r.found_2delta or 0:.0%} | "
            f"{r.matters_2delta or 0:.0%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsmatrix.bench.effects", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs of each cell (rounds)")
    parser.add_argument(
        "--cov",
        default=effects.COV,
        help="cells (each cell's own variance, Welch-Satterthwaite df: the default) "
        "or a statsmodels covariance: HC0, HC1, HC2, HC3, nonrobust",
    )
    parser.add_argument("--format", choices=["md", "json"], default="md")
    args = parser.parse_args(argv)
    if args.repeats < 2 or args.trials < 1:
        print("--repeats must be at least 2 (pure error) and --trials at least 1", file=sys.stderr)
        return 2
    rows = simulate(args.trials, args.seed, args.cov, args.repeats)
    print(
        json.dumps([asdict(r) for r in rows], indent=1)
        if args.format == "json"
        else markdown(rows, args.trials, args.seed, args.cov, args.repeats)
    )
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.effects")
