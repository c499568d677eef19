"""The gate's designs as ``python -m fsmatrix.bench.gate`` measures them: a **fixed** design (8 pairs,
one look, a regression confirmed by 8 more) and a **sequential** one (looks after 8, 12, ... 24 pairs,
``outcome.Looks``, until PASS or FAIL; FAIL confirmed the same way), as ``pr-gate.sh`` runs them.

``run_design`` plays a design on pairs already made (the bench runs the most pairs any look needs and
judges the first n at each look: what the gate would have seen had it stopped there), so one set of
runs measures both designs. ``simulate`` plays them on drawn pairs instead — log ratios normal with
the spread given, one gated metric, the gate's own functions (``stats.compare_paired``,
``stats.is_regression``, ``outcome.bound_paired``) — to show the designs' error rates over thousands
of rounds in seconds, at spreads the machine did not happen to have.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fsmatrix.results.verdict import outcome, stats


@dataclass(frozen=True)
class Design:
    """How many pairs the gate looks at, and how many confirm a FAIL."""

    name: str
    looks: tuple[int, ...]
    confirm: int

    @property
    def planned(self) -> outcome.Looks | None:
        """The looks ``compare --looks`` is given; None for one look (judged at α)."""
        return outcome.Looks(self.looks) if len(self.looks) > 1 else None


def designs(first: int, step: int, most: int, confirm: int) -> tuple[Design, Design]:
    """The fixed design (``first`` pairs) and the sequential one (``first``:``step``:``most``)."""
    sequential = outcome.Looks.parse(f"{first}:{step}:{most}").sizes
    return (
        Design(f"fixed {first}+{confirm}", (first,), confirm),
        Design(f"sequential {first}:{step}:{most} +{confirm}", sequential, confirm),
    )


def run_design(
    design: Design, look: Callable[[int], str], confirmed: Callable[[int], str], available: int
) -> tuple[str, int]:
    """The design's verdict and the pairs it used: ``look(n)`` is the verdict on the first n pairs
    (PASS, FAIL or NOT DECIDED), ``confirmed(n)`` the verdict after confirming a FAIL at n
    (``gate.Confirmed``). Looks beyond the ``available`` pairs are not made."""
    used = 0
    for n in design.looks:
        if n > available:
            break
        used = n
        verdict = look(n)
        if verdict == outcome.FAIL:
            return confirmed(n), n + design.confirm
        if verdict == outcome.PASS:
            return verdict, n
    return outcome.NOT_DECIDED, used


@dataclass
class Outcomes:
    """One design's verdicts on one kind of comparison, round by round."""

    verdicts: list[str] = field(default_factory=list)
    pairs: list[int] = field(default_factory=list)

    def add(self, verdict: str, pairs: int) -> None:
        self.verdicts.append(verdict)
        self.pairs.append(pairs)

    def hits(self, verdict: str) -> list[bool]:
        return [v == verdict for v in self.verdicts]

    def pairs_used(self) -> str:
        if not self.pairs:
            return "-"
        return f"{statistics.median(self.pairs):g} ({min(self.pairs)}..{max(self.pairs)})"


# --------------------------------------------------------------------------------- simulation


def _look(logs: np.ndarray, threshold: float, levels: tuple[float, float]) -> str:
    """The gate's verdict on one gated metric's log ratios (HEAD/BASE, lower is better), at the FAIL
    and PASS levels: what ``gate.compare`` decides for a cell with one gated metric."""
    fail_level, pass_level = levels
    pairs = [(1.0, math.exp(x)) for x in logs]
    if stats.is_regression(stats.compare_paired(pairs, "lower", alpha=fail_level), threshold):
        return outcome.FAIL
    bound = outcome.bound_paired(pairs, "lower", threshold, pass_level, alpha=fail_level)
    return outcome.PASS if bound and bound.shown else outcome.NOT_DECIDED


def simulate(
    designs_: Sequence[Design],
    effects: Sequence[float],
    spread: float,
    threshold: float,
    rounds: int,
    *,
    seed: int = 0,
) -> dict[tuple[str, float], Outcomes]:
    """Each design's outcomes, per true effect (0.2: HEAD 20 % worse), over ``rounds`` rounds of pairs
    whose log ratios are normal with sd ln(1 + ``spread``), judged at the gate's α. Every design sees
    the same draws."""
    alpha = stats.ALPHA
    rng = np.random.default_rng(seed)
    sd = math.log1p(spread)
    most = max(max(d.looks) for d in designs_)
    again = max(d.confirm for d in designs_)
    out = {(d.name, e): Outcomes() for d in designs_ for e in effects}
    for _ in range(rounds):
        for effect in effects:
            first = rng.normal(math.log1p(effect), sd, most)
            second = rng.normal(math.log1p(effect), sd, again)
            for d in designs_:
                planned = d.planned
                levels = (planned.fail_level(alpha), planned.pass_level(alpha)) if planned else (alpha, alpha)

                def look(n: int, levels: tuple[float, float] = levels, logs: np.ndarray = first) -> str:
                    return _look(logs[:n], threshold, levels)

                def confirmed(n: int, d: Design = d, logs: np.ndarray = second) -> str:
                    # the confirmation: one look at α; a FAIL not shown again is NOT DECIDED (gate.Confirmed)
                    verdict = _look(logs[: d.confirm], threshold, (alpha, alpha))
                    return outcome.FAIL if verdict == outcome.FAIL else outcome.NOT_DECIDED

                out[(d.name, effect)].add(*run_design(d, look, confirmed, most))
    return out
