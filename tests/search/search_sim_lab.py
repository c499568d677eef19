"""A SIMULATED lab for the pure engine of ``fsmatrix search`` (search/stages.py): run values drawn
log-normal around known true log effects, never measured (the one place a stand-in is right: it tests
the stages' decisions, not the machine). Seeded: the same lab gives the same runs. Its race plays
``verdict.race.race_look`` round by round, as ``fsmatrix run --race`` does; the real lab is
search/lab.py, the benchmark's bench/search*.py."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fsmatrix.matrix import RaceSettings
from fsmatrix.results.store.records import Left
from fsmatrix.results.verdict import race
from fsmatrix.results.verdict.space import Config, Observation, Space, SpaceSetting
from fsmatrix.results.verdict.stats import ALPHA
from fsmatrix.search.stages import RaceResult

Truth = Callable[[Config], float]  # a configuration's true log metric


def space_of(sizes: Sequence[int], direction: str = "lower", missing: Sequence[Config] = ()) -> Space:
    """Settings s0, s1, ... of these numbers of levels (default the first), every configuration of
    their cross but ``missing`` (an exclude)."""
    settings = tuple(SpaceSetting(f"s{i}", tuple(f"v{j}" for j in range(n))) for i, n in enumerate(sizes))
    configs = tuple(c for c in itertools.product(*(range(n) for n in sizes)) if c not in set(missing))
    return Space(settings, configs, "elapsed_s", direction)


def additive(base: float, effects: dict[tuple[int, int], float]) -> Truth:
    """log metric = ln base + the effect of each (setting, level) the configuration has."""
    return lambda c: math.log(base) + sum(effects.get((a, lv), 0.0) for a, lv in enumerate(c))


@dataclass
class SimulatedLab:
    """Draws each run's value as exp(truth(config) + N(0, sigma)), seeded; counts the runs."""

    space: Space
    truth: Truth
    sigma: float = 0.02
    seed: int = 0
    run_s: float | None = None  # a run's seconds (``runs_of``); None: no estimate
    used: int = 0
    calls: list[tuple[str, int]] = field(default_factory=list)  # (stage, configurations) per call
    ran: set[Config] = field(default_factory=set)  # every configuration run
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def _draw(self, config: Config) -> float:
        self.used += 1
        self.ran.add(config)
        return math.exp(self.truth(config) + float(self.rng.normal(0.0, self.sigma)))

    def measure(self, stage: str, configs: Sequence[Config], repeats: int) -> list[Observation]:
        self.calls.append((stage, len(configs)))
        return [Observation(c, self._draw(c), stage, r) for r in range(repeats) for c in configs]

    def race(self, configs: Sequence[Config], max_repeats: int, delta: float) -> RaceResult:
        """Rounds of every configuration still in the race, ``race.race_look`` after each."""
        self.calls.append(("race", len(configs)))
        names = {str(c): c for c in configs}
        samples: dict[str, list[float | None]] = {n: [] for n in names}
        left: dict[str, Left] = {}
        settings = RaceSettings(3, max_repeats, delta)
        observations = []
        for r in range(1, max_repeats + 1):
            for n, c in names.items():
                if n not in left:
                    value = self._draw(c)
                    samples[n].append(value)
                    observations.append(Observation(c, value, "race", r))
            _, leaving, still_open = race.race_look(samples, self.space.direction, left, r, settings, ALPHA)
            left.update(leaving)
            if not still_open:
                break
        best = next((names[n] for n, x in left.items() if x.action in ("best", "leader")), None)
        equivalent = tuple(names[n] for n, x in left.items() if x.action == "equivalent")
        decided = any(x.action == "best" for x in left.values())
        return RaceResult(tuple(observations), best, equivalent, decided)

    def runs_used(self) -> int:
        return self.used

    def runs_of(self, budget_s: float) -> int | None:
        return None if self.run_s is None else int(budget_s // self.run_s)
