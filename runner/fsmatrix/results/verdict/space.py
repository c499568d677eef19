"""A search's space and its model: which configurations exist, what a setting's effect is on what ran,
and what the model predicts for every configuration, with intervals simultaneous over the space
(``fsmatrix search``, runner/fsmatrix/search/; docs/search.md).

**The space.** Settings (a matrix file's axes of two or more values), each with its levels and the
level of the baseline configuration (its default: a search fixes a setting there when its effect is
within ±δ); the configurations that exist (the cross ``exclude`` left: a setting that exists under one
filesystem only leaves the others out), each a ``Config``: its level's index on every setting.

**The model.** A linear model on the logs of every passed run (statsmodels' OLS, HC3 standard errors as
``effects.COV``): an intercept, each setting's s − 1 sum-to-zero contrasts (``matrix.design``'s
``model_matrix`` coding) and the two-setting interactions of the settings named, taking only the
columns the configurations that ran can estimate. A prediction of a configuration that never ran rests
on the model: no interaction of three or more settings, none between settings the model leaves out
(effect heredity: a setting with no main effect has no interaction worth chasing) — ``ASSUMPTION``.

**Simultaneous intervals.** Every contrast of two configurations' predictions is a combination of the
model's p estimable columns, so Scheffé's multiplier sqrt(p · F(1 − α; p, ν)) makes all of them hold
together at 1 − α, however many configurations the space has.

Pure: numbers in, decisions out (verdict/ reads nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Config = tuple[int, ...]  # a configuration: the index of its level on every setting, in the space's order

ASSUMPTION = (
    "no interaction of three or more settings, and none involving a setting fixed for showing no effect "
    "(effect heredity)"
)


@dataclass(frozen=True)
class SpaceSetting:
    """A setting of the space: the matrix file's axis (its dotted name, "filesystem", "gtm.journal"), its
    levels' labels in the file's order and the index of the baseline configuration's level."""

    name: str
    levels: tuple[str, ...]
    default: int = 0


@dataclass(frozen=True)
class Space:
    """Every configuration a search may choose: its ``settings`` and the ``configurations`` that exist
    (in the cross's order), judged on ``metric`` where ``direction`` ("lower" or "higher") is better."""

    settings: tuple[SpaceSetting, ...]
    configurations: tuple[Config, ...]
    metric: str
    direction: str

    @property
    def baseline(self) -> Config:
        """Every setting at its default (a configuration of the space: the matrix's baseline cell)."""
        return tuple(s.default for s in self.settings)

    def label(self, config: Config) -> str:
        """The settings that differ from the baseline, "name=level, ..." ("baseline" when none)."""
        parts = [f"{s.name}={s.levels[i]}" for s, i in zip(self.settings, config, strict=True) if i != s.default]
        return ", ".join(parts) or "baseline"

    def full_cross_runs(self, repeats: int = 3) -> int:
        return len(self.configurations) * repeats


@dataclass(frozen=True)
class Observation:
    """One passed run's primary metric: its configuration, value, the stage that ran it ("screen",
    "refine", "race", "confirm") and its round (the repeat number within that stage: the model's block)."""

    config: Config
    value: float
    stage: str
    round: int


@dataclass(frozen=True)
class SettingEffect:
    """A setting's effect: the metric's ratio at ``level`` against the setting's default level (averaged
    over the other settings), its interval (one family with the other settings' at 1 − α, Bonferroni)
    and its words (``effects.WORDS`` against ±δ; a setting of three levels has one row per other level)."""

    setting: str
    level: str
    default: str
    ratio: float
    ci_low: float
    ci_high: float
    words: str


@dataclass(frozen=True)
class Contrast:
    """A configuration against a reference (the predicted best, or the baseline): the metric's predicted
    ratio (this one's over the reference's) with its Scheffé interval over the whole space, and whether
    it is shown worse (the whole interval on the worse side of 1)."""

    config: Config
    ratio: float
    ci_low: float
    ci_high: float
    shown_worse: bool


@dataclass(frozen=True)
class SpaceModel:
    """A fitted model: the names of its estimable columns (``terms``), the settings whose two-setting
    interactions it has, its residual degrees of freedom, and what predicting needs (``params``,
    ``cov``: numpy arrays; ``columns``: the term order for building a configuration's row)."""

    terms: tuple[str, ...]
    interacting: tuple[int, ...]
    df_resid: int
    params: Any
    cov: Any
    columns: tuple[tuple[tuple[int, int], ...], ...]  # each term: (setting, contrast level) factors; () the intercept

    def predict(self, space: Space, configs: Sequence[Config]) -> Any:
        """The model's log metric for each configuration (numpy array)."""
        raise NotImplementedError

    def contrasts(self, space: Space, reference: Config, alpha: float) -> list[Contrast]:
        """Every configuration of the space against ``reference``, Scheffé-simultaneous at 1 − α."""
        raise NotImplementedError


def fit(space: Space, observations: Sequence[Observation], interacting: Sequence[int]) -> SpaceModel | str:
    """The model of the module's docstring on these runs (main effects of every setting, two-setting
    interactions among ``interacting``), or why it cannot be fitted ("not enough data: ...": no
    replicate, fewer runs than terms, a value ≤ 0)."""
    raise NotImplementedError


def setting_effects(
    space: Space, observations: Sequence[Observation], alpha: float, delta: float
) -> list[SettingEffect] | str:
    """Each setting's main effect from a main-effects model on these runs: one row per non-default
    level, all rows one Bonferroni family at 1 − α, words against ±δ; or why not."""
    raise NotImplementedError


def scheffe(p: int, df: int, alpha: float) -> float:
    """Scheffé's multiplier sqrt(p · F(1 − α; p, df))."""
    raise NotImplementedError
