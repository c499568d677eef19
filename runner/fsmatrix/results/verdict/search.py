"""A search's answer (``fsmatrix search``): the best configuration found with its ratio to the baseline,
the settings that matter, the settings fixed and why, the candidates raced, what was never run and the
model's bound on it, the runs used against the full cross's; its JSON (docs/search.schema.json,
``VERSION``). Built by ``fsmatrix.search.stages.run_search``; rendered by results/render/search.py."""

from __future__ import annotations

import math
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

    def words(self, direction: str, delta: float) -> str:
        """The interval against the baseline, in the answer's words (``SHOWN``): "better" or "worse" when
        it excludes 1 on that side, "equivalent" within ±δ, "not separated" otherwise."""
        low, high = (self.ci_low, self.ci_high) if direction == "lower" else (1 / self.ci_high, 1 / self.ci_low)
        if high < 1:
            return "better"
        if low > 1:
            return "worse"
        return "equivalent" if 1 / (1 + delta) < low and high < 1 + delta else "not separated"


SHOWN = ("better", "equivalent", "not separated", "worse")  # the confirmation's words (``Ratio.words``)


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
    ``assumption``: what the bound rests on; ``runs_used`` against ``full_cross_runs`` (3 repeats);
    ``notes``: what the numbers alone do not say (the winner is the baseline, so nothing was confirmed;
    the model did not hold, so the candidates were judged on their own runs; ...), one sentence each;
    ``settle_repeats``: where the confirmation left the found configuration not separated from the
    baseline, the fresh runs of each that would settle ±δ (``power.repeats_needed``; None: more than
    its range, or nothing to settle)."""

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
    notes: tuple[str, ...] = ()
    settle_repeats: int | None = None

    @property
    def shown(self) -> str | None:
        """What the confirmation showed of the found configuration against the baseline (``SHOWN``);
        None without a confirmation, or when the found configuration is the baseline."""
        if self.observed is None or self.best is None or self.best == self.space.baseline:
            return None
        return self.observed.words(self.space.direction, self.delta)

    def to_json(self) -> dict[str, Any]:
        """The documented JSON (docs/search.schema.json): numbers that are not finite as null."""
        space = self.space
        return {
            "version": VERSION,
            "metric": space.metric,
            "direction": space.direction,
            "alpha": self.alpha,
            "delta": self.delta,
            "confidence": 1 - self.alpha,
            "settings": [
                {"name": s.name, "levels": list(s.levels), "default": s.levels[s.default]} for s in space.settings
            ],
            "configurations": len(space.configurations),
            "baseline": _config(space, space.baseline),
            "best": None if self.best is None else _config(space, self.best),
            "reason": self.reason,
            "observed": _ratio(self.observed),
            "shown": self.shown,
            "settle_repeats": self.settle_repeats,
            "predicted": _ratio(self.predicted),
            "model_held": self.model_held,
            "effects": [_effect(e) for e in self.effects],
            "fixed": [_effect(e) for e in self.fixed],
            "candidates": [_contrast(space, c) for c in self.candidates],
            "untried": self.untried,
            "untried_bound": _number(self.untried_bound),
            "bound_holds": self.bound_holds,
            "assumption": self.assumption,
            "runs_used": self.runs_used,
            "full_cross_runs": self.full_cross_runs,
            "stages": [
                {"name": s.name, "design": s.design, "configurations": s.configurations, "runs": s.runs}
                for s in self.stages
            ],
            "notes": list(self.notes),
        }


def _number(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _config(space: Space, config: Config) -> dict[str, Any]:
    levels = {s.name: s.levels[i] for s, i in zip(space.settings, config, strict=True)}
    return {"label": space.label(config), "levels": levels}


def _ratio(r: Ratio | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"ratio": _number(r.ratio), "ci_low": _number(r.ci_low), "ci_high": _number(r.ci_high)}


def _effect(e: SettingEffect) -> dict[str, Any]:
    return {
        "setting": e.setting,
        "level": e.level,
        "default": e.default,
        "ratio": _number(e.ratio),
        "ci_low": _number(e.ci_low),
        "ci_high": _number(e.ci_high),
        "words": e.words,
    }


def _contrast(space: Space, c: Contrast) -> dict[str, Any]:
    return {
        **_config(space, c.config),
        "ratio": _number(c.ratio),
        "ci_low": _number(c.ci_low),
        "ci_high": _number(c.ci_high),
        "shown_worse": c.shown_worse,
    }
