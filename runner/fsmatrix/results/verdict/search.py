"""A search's answer (``fsmatrix search``): the best configuration found with its ratio to the baseline,
the settings that matter, the settings fixed and why, the candidates raced, what was never run and the
model's bound on it, the runs used against the full cross's; its JSON (docs/search.schema.json,
``VERSION``). Built by ``fsmatrix.search.stages.run_search``; rendered by results/render/search.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fsmatrix.results.verdict.space import Config, Contrast, SettingEffect, Space

VERSION = 1
STAGES = ("screen", "refine", "race", "confirm")


@dataclass(frozen=True)
class StageRecord:
    """What a stage ran: its name (``STAGES``), its design in words ("Plackett–Burman, 12 cells",
    "full cross of 3 settings, 8 cells", "race of 5 candidates"), its configurations and runs."""

    name: str
    design: str
    configurations: int
    runs: int


@dataclass(frozen=True)
class Ratio:
    """A metric ratio (the found configuration over the baseline) with its interval."""

    ratio: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class SearchAnswer:
    """The answer of a search over ``space``.

    ``best``: the configuration found (None with ``reason`` when the search could not answer);
    ``observed``: its ratio to the baseline on the confirmation's fresh runs (Welch on the logs, 1 − α);
    ``predicted``: the model's ratio for it (Scheffé, simultaneous over the space); ``model_held``: the
    observed ratio inside the predicted interval (False: the model was wrong there, and the answer
    rests on the candidates' own runs alone; None: no confirmation ran).
    ``effects``: each setting's effect (screening and refining runs together); ``fixed``: the settings
    fixed at their default, with the effect that let them be; ``candidates``: the configurations raced,
    each against the predicted best; ``untried``: configurations of the space never run;
    ``untried_bound``: the largest ratio by which the model allows an untried configuration to beat the
    best found (the better direction: > 1 is better), and ``bound_holds`` whether that is at most 1 + δ;
    ``assumption``: what the bound rests on; ``runs_used`` against ``full_cross_runs`` (3 repeats)."""

    space: Space
    delta: float
    alpha: float
    best: Config | None
    observed: Ratio | None
    predicted: Ratio | None
    model_held: bool | None
    effects: tuple[SettingEffect, ...]
    fixed: tuple[SettingEffect, ...]
    candidates: tuple[Contrast, ...]
    untried: int
    untried_bound: float | None
    bound_holds: bool | None
    assumption: str
    runs_used: int
    full_cross_runs: int
    stages: tuple[StageRecord, ...]
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The documented JSON (docs/search.schema.json)."""
        raise NotImplementedError
