"""Simulated spaces for the benchmark of ``fsmatrix search`` (bench/search.py): a seeded true space
(``TrueSpace``, ``true_space``) and a lab that runs on it (``SimulatedLab``, the ``SearchLab`` protocol).

**A true space.** 5 to 10 settings of 2 to 4 levels each (labels "l0", "l1", ...; the default level
"l0"), every configuration of the cross existing, drawn again until the cross has at most
``MAX_CONFIGS`` (2,000) configurations (4^10 would be a million: too many to hold every configuration's
truth and to count its full cross) and falls in the size band asked for (``BANDS``). The metric is an
elapsed time ("elapsed_s", lower is better) of about 10 s whose true log is

- the sum of main effects: 2 to 4 settings (the *active* ones) have an effect of 5 to 40 % (either way)
  at each non-default level; every other setting's levels are exactly 0 or tiny (within ±1 %);
- plus one or two two-setting interactions among the active settings (effect heredity holds), 3 to
  15 % (either way) at each pair of non-default levels;
- for the kind "wrong" (``KINDS``) also, by ``variant``: a strong three-setting interaction (10 to
  30 %, either way, at every triple of non-default levels of three settings drawn from all of them:
  neither the two-setting model nor heredity holds), unequal noise (one setting's non-default levels
  have three times the CV, at most 30 %), or both.

**Noise**: log-normal, the logs' σ = sqrt(ln(1 + CV²)); CV 3, 8 or 15 % for every configuration, or
"mixed": each configuration's CV drawn from those three.

**The lab** draws a run of a configuration as its true median times the noise, counts every run and
races as ``fsmatrix run`` races a comparison group (``verdict.race.race_look``, as bench/race_sim.py's
``race_trial``). Deterministic for a seed (given the same calls in the same order).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fsmatrix.matrix import RaceSettings
from fsmatrix.results.store.records import Left
from fsmatrix.results.verdict import race, stats
from fsmatrix.results.verdict.space import Config, Observation, Space, SpaceSetting
from fsmatrix.search.stages import RaceResult

KINDS = ("holds", "wrong")
CVS: tuple[float | str, ...] = (0.03, 0.08, 0.15, "mixed")
MIXED = (0.03, 0.08, 0.15)
VARIANTS = ("three-way", "unequal noise", "both")  # how a "wrong" space breaks the model
BANDS = ((2, 63), (64, 255), (256, 2000))  # configurations: the report's size bands
MAX_CONFIGS = 2000
SCALE_S = 10.0  # the baseline's time, about; the scale changes nothing
METRIC = "elapsed_s"
TRIES = 100_000


@dataclass(frozen=True)
class TrueSpace:
    """A simulated space and its truth: each configuration's true log metric (``logs``, in the space's
    configuration order) and CV; ``kind`` ("holds" or "wrong"), ``cv`` (a CV or "mixed"), ``variant``
    (how a "wrong" space breaks the model, None when it holds)."""

    space: Space
    logs: np.ndarray
    cvs: np.ndarray
    kind: str
    cv: float | str
    variant: str | None

    def index(self, config: Config) -> int:
        """The configuration's position in the space's order (the cross's, mixed radix)."""
        i = 0
        for s, level in zip(self.space.settings, config, strict=True):
            i = i * len(s.levels) + level
        return i

    def best(self) -> Config:
        """The truly best configuration (the lowest true time)."""
        return self.space.configurations[int(np.argmin(self.logs))]

    def ratio(self, config: Config, reference: Config) -> float:
        """The true ratio of the two configurations' medians (``config`` over ``reference``)."""
        return math.exp(float(self.logs[self.index(config)] - self.logs[self.index(reference)]))


def _sizes(rng: np.random.Generator, band: tuple[int, int]) -> list[int]:
    """Levels of 5 to 10 settings (2 to 4 each) whose cross falls in ``band``: drawn until it does."""
    for _ in range(TRIES):
        k = int(rng.integers(5, 11))
        levels = [int(x) for x in rng.integers(2, 5, size=k)]
        if band[0] <= math.prod(levels) <= min(band[1], MAX_CONFIGS):
            return levels
    raise ValueError(f"no space of 5 to 10 settings in the band {band}")


def _signed(rng: np.random.Generator, low: float, high: float, size: tuple[int, ...]) -> np.ndarray:
    """Log effects of ``low`` to ``high`` (as ratios − 1), either way at random."""
    return np.asarray(np.log1p(rng.uniform(low, high, size)) * rng.choice((-1.0, 1.0), size), dtype=float)


def _term(levels: Sequence[int], which: Sequence[int], table: np.ndarray) -> np.ndarray:
    """A term over ``which`` settings (``table``: their levels' cross, zero at any default) on every
    configuration of the cross of ``levels``, in the cross's order."""
    shape = [levels[i] if i in which else 1 for i in range(len(levels))]
    order = sorted(range(len(which)), key=lambda j: which[j])
    return np.broadcast_to(np.transpose(table, order).reshape(shape), tuple(levels)).reshape(-1)


def _interaction(
    rng: np.random.Generator, levels: Sequence[int], which: Sequence[int], low: float, high: float
) -> np.ndarray:
    table = _signed(rng, low, high, tuple(levels[i] for i in which))
    for axis in range(len(which)):  # a default level adds nothing: the term is an interaction
        np.moveaxis(table, axis, 0)[0] = 0.0
    return _term(levels, which, table)


def true_logs(
    rng: np.random.Generator, levels: Sequence[int], variant: str | None
) -> tuple[np.ndarray, tuple[int, ...]]:
    """The true log metric of every configuration (module docstring) and the active settings."""
    k = len(levels)
    active = tuple(sorted(int(i) for i in rng.choice(k, size=int(rng.integers(2, min(4, k) + 1)), replace=False)))
    logs = np.full(math.prod(levels), math.log(SCALE_S))
    for i in range(k):
        if i in active:
            main = _signed(rng, 0.05, 0.40, (levels[i],))
        else:
            main = rng.uniform(-0.01, 0.01, levels[i]) * (rng.random() < 0.5)
        main[0] = 0.0
        logs += _term(levels, (i,), main)
    pairs = list(itertools.combinations(active, 2))
    for p in rng.permutation(len(pairs))[: int(rng.integers(1, 3))]:
        logs += _interaction(rng, levels, pairs[int(p)], 0.03, 0.15)
    if variant in ("three-way", "both"):
        three = tuple(sorted(int(i) for i in rng.choice(k, size=3, replace=False)))
        logs += _interaction(rng, levels, three, 0.10, 0.30)
    return logs, active


def _cvs(rng: np.random.Generator, levels: Sequence[int], cv: float | str, variant: str | None) -> np.ndarray:
    n = math.prod(levels)
    cvs = rng.choice(MIXED, size=n) if cv == "mixed" else np.full(n, float(cv))
    if variant in ("unequal noise", "both"):
        noisy = int(rng.integers(len(levels)))
        table = np.ones(levels[noisy])
        table[1:] = 3.0
        cvs = np.minimum(cvs * _term(levels, (noisy,), table), 0.30)
    return np.asarray(cvs, dtype=float)


def true_space(
    seed: Sequence[int], kind: str, cv: float | str, band: tuple[int, int], variant: str | None = None
) -> TrueSpace:
    """A seeded true space of ``kind`` ("holds", or "wrong" with its ``variant``), noise ``cv`` and a
    number of configurations in ``band`` (module docstring)."""
    if kind not in KINDS or cv not in CVS or (kind == "wrong") != (variant in VARIANTS):
        raise ValueError(
            f"kind {kind!r}, cv {cv!r}, variant {variant!r}: kinds {KINDS}, CVs {CVS}, variants {VARIANTS}"
        )
    rng = np.random.default_rng(list(seed))
    levels = _sizes(rng, band)
    settings = tuple(SpaceSetting(f"s{i}", tuple(f"l{j}" for j in range(n))) for i, n in enumerate(levels))
    configs = tuple(itertools.product(*(range(n) for n in levels)))
    logs, _ = true_logs(rng, levels, variant)
    space = Space(settings, configs, METRIC, "lower")
    return TrueSpace(space, logs, _cvs(rng, levels, cv, variant), kind, cv, variant)


def sigma(cv: float) -> float:
    """The σ of the logs of log-normal noise of this CV."""
    return math.sqrt(math.log1p(cv**2))


class SimulatedLab:
    """The ``SearchLab`` of a ``TrueSpace``: seeded draws, every run counted, races by ``race_look``."""

    def __init__(self, truth: TrueSpace, seed: Sequence[int]) -> None:
        self.truth = truth
        self.rng = np.random.default_rng(list(seed))
        self.runs = 0

    def draw(self, config: Config) -> float:
        """One run of a configuration: its metric's value."""
        i = self.truth.index(config)
        self.runs += 1
        return math.exp(float(self.truth.logs[i]) + sigma(float(self.truth.cvs[i])) * float(self.rng.standard_normal()))

    def measure(self, stage: str, configs: Sequence[Config], repeats: int) -> list[Observation]:
        """Every configuration ``repeats`` runs, in rounds, each round in a seeded order."""
        out = []
        for r in range(1, repeats + 1):
            for j in self.rng.permutation(len(configs)):
                out.append(Observation(configs[j], self.draw(configs[j]), stage, r))
        return out

    def race(self, configs: Sequence[Config], max_repeats: int, delta: float) -> RaceResult:
        """The configurations raced as bench/race_sim.py's ``race_trial`` races a group: rounds of the
        cells still in, ``race_look`` after each (min 3 repeats, ``max_repeats``, ``delta``)."""
        settings = RaceSettings(
            min_repeats=stats.MIN_SAMPLES, max_repeats=max(max_repeats, stats.MIN_SAMPLES), delta=delta
        )
        names = [f"c{j}" for j in range(len(configs))]
        drawn: dict[str, list[float | None]] = {c: [] for c in names}
        left: dict[str, Left] = {}
        observations: list[Observation] = []
        for r in range(1, settings.max_repeats + 1):
            for j, c in enumerate(names):
                if c not in left:
                    value = self.draw(configs[j])
                    drawn[c].append(value)
                    observations.append(Observation(configs[j], value, "race", r))
            _, leaving, still_open = race.race_look(drawn, "lower", left, r, settings, stats.ALPHA)
            left.update(leaving)
            if not still_open:
                break
        top = [c for c in names if left[c].action in ("best", "leader")]
        best = configs[names.index(top[0])] if top else None
        equivalent = tuple(configs[j] for j, c in enumerate(names) if left[c].action == "equivalent")
        decided = not any(e.status == "not separated" for e in left.values())
        return RaceResult(tuple(observations), best, equivalent, decided)

    def runs_used(self) -> int:
        return self.runs

    def runs_of(self, budget_s: float) -> int | None:
        """No estimate: a simulated run takes no time (a search's budget here is in runs)."""
        return None
