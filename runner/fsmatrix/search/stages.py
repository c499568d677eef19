"""A search's stages over a ``SearchLab`` (docs/search.md), pure: the lab runs, this decides.

1. **Screen**: a screening design over every setting (Plackett–Burman when every setting has two
   levels, else a D-optimal design for the main-effects model; ``matrix.design``), plus the baseline,
   ``settings.repeats`` runs each. Each setting's main effect (``space.setting_effects``): a setting
   whose every level is *equivalent* to its default within ±δ is fixed at its default.
2. **Refine**: a design over the settings still in (their full cross when it fits what the budget
   leaves after the race and the confirmation, else a D-optimal design for main effects and their
   two-setting interactions), ``settings.repeats`` runs each. The model on every run so far
   (``space.fit``) predicts every configuration of the space; each is contrasted with the predicted
   best, Scheffé-simultaneous.
3. **Race**: the configurations not shown worse than the predicted best (at most
   ``settings.max_candidates``, the best predicted first), raced (``verdict.race.race_look``'s rule).
4. **Confirm**: ``settings.confirm`` fresh runs of the race's winner and of the baseline, interleaved:
   the observed ratio must fall inside the model's interval for it; where it does not, the model was
   wrong there, and the answer rests on the candidates' own runs alone (no bound on the untried).

Bad input, before any run (``SearchError``, one line naming the key, exit 2 in the CLI): a budget
smaller than the screening stage, a space of one configuration."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from fsmatrix.matrix import SearchSettings
from fsmatrix.results.verdict.search import SearchAnswer
from fsmatrix.results.verdict.space import Config, Observation, Space


class SearchError(Exception):
    """A search that cannot start: one line naming the ``search:`` key (or the space) and why."""


@dataclass(frozen=True)
class RaceResult:
    """What racing some configurations gave: every run of the race, its best (or leader, when it ended
    undecided), the configurations left equivalent to it and whether it was decided."""

    observations: tuple[Observation, ...]
    best: Config | None
    equivalent: tuple[Config, ...]
    decided: bool


class SearchLab(Protocol):
    """Where a search's runs happen: the real lab (search/lab.py: ordinary cells on a backend, stored
    and resumable) or a simulated one (bench/search.py). Every call may return runs made before (a
    resumed search): it runs only what is missing."""

    def measure(self, stage: str, configs: Sequence[Config], repeats: int) -> list[Observation]:
        """Every configuration ``repeats`` runs, fixed repeats in rounds (each round in a seeded order);
        the passed runs' observations of this stage (stage "screen", "refine" or "confirm")."""
        ...

    def race(self, configs: Sequence[Config], max_repeats: int, delta: float) -> RaceResult:
        """These configurations raced (stage "race") as ``fsmatrix run`` races a comparison group."""
        ...

    def runs_used(self) -> int:
        """Runs made (or found stored) so far, every stage."""
        ...

    def runs_of(self, budget_s: float) -> int | None:
        """A time budget in runs, from the store's past runs of these cells (None: no estimate)."""
        ...


def screen_plan(space: Space, settings: SearchSettings) -> list[Config]:
    """The screening stage's configurations (the baseline among them), or ``SearchError``."""
    raise NotImplementedError


def run_search(space: Space, settings: SearchSettings, lab: SearchLab, alpha: float) -> SearchAnswer:
    """The four stages of the module's docstring on ``lab``; the answer."""
    raise NotImplementedError
