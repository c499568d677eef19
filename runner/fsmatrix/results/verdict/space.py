"""A search's space and its model: which configurations exist, what a setting's effect is on what ran,
and what the model predicts for every configuration, with intervals simultaneous over the space
(``fsmatrix search``, runner/fsmatrix/search/; docs/search.md).

**The space.** Settings (a matrix file's axes of two or more values), each with its levels and the
level of the baseline configuration (its default: a search fixes a setting there when its effect is
within ±δ); the configurations that exist (the cross ``exclude`` left: a setting that exists under one
filesystem only leaves the others out), each a ``Config``: its level's index on every setting.

**The model.** A linear model on the logs of every passed run (statsmodels' OLS, HC3 standard errors,
``COV``: a search's designs leave many cells a single run, whose own variance cannot be estimated, so
not the effects' per-cell errors): an intercept, each setting's s − 1 sum-to-zero contrasts (``matrix.design``'s
``model_matrix`` coding) and the two-setting interactions of the settings named, taking only the
columns the configurations that ran can estimate. A prediction of a configuration that never ran rests
on the model: no interaction of three or more settings, none between settings the model leaves out
(effect heredity: a setting with no main effect has no interaction worth chasing) — ``ASSUMPTION``.

A column the runs cannot estimate (a combination of those before it on the configurations that ran)
is left out of the model, so a configuration's prediction takes it as 0: where that column is an
interaction the ASSUMPTION rules out, this is the prediction the assumption gives; where it is one the
design aliased, the prediction rests on the assumption that it is 0. The round of a run is no column:
every stage runs its cells in seeded orders, round by round, so a drift spreads into the error rather
than into one setting's effect (and a prediction must not depend on which round a run was in).

**Simultaneous intervals.** Every contrast of two configurations' predictions is a combination of the
model's p estimable columns besides the intercept, so Scheffé's multiplier sqrt(p · F(1 − α; p, ν)) (ν
the residual degrees of freedom) makes all of them hold together at 1 − α, however many
configurations the space has. Scheffé's argument is exact for the classical covariance; with HC3's it
is the usual large-sample one (the robust covariance in place of σ²(X'X)⁻¹). Where a run alone
decides a term (leverage 1: a saturated corner), HC3 is 0/0 and the model takes the classical
covariance (``SpaceModel.cov_type``).

**A setting's effect** (``setting_effects``, what a search fixes settings by): a main-effects model, each
non-default level against the default level (the same difference at every other setting's level), an
interval at 1 − α/(2m) on t with the residual degrees of freedom (Bonferroni over the m rows of every
setting), words against ±δ (``effects.words_for``). A level the runs cannot contrast with the default
(it never ran) gets nan numbers and "not separated": a search keeps such a setting in.

Pure: numbers in, decisions out (verdict/ reads nothing)."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from fsmatrix.results.verdict.effects import words_for

Config = tuple[int, ...]  # a configuration: the index of its level on every setting, in the space's order
Factor = tuple[int, int]  # a setting's index and the level of one of its s − 1 contrasts
Term = tuple[Factor, ...]  # a model column: the product of its factors' codes; () the intercept

ASSUMPTION = (
    "no interaction of three or more settings, and none involving a setting whose own effect the "
    "screening did not show (effect heredity)"
)
TIMES = " × "
COV = "HC3"  # statsmodels' heteroscedasticity-consistent covariance: the choice bench/search.py measures
TOLERANCE = 1e-8  # a column (or a contrast) this small against its size after projection is no new direction
LEVERAGE = 1 - 1e-8  # a run this alone in deciding a term leaves HC3 nothing to weigh (0/0)


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
    and its words (``effects.WORDS`` against ±δ; a setting of three levels has one row per other level).
    A level the runs cannot compare with the default (it never ran) has nan numbers, "not separated"."""

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
    ``cov``: numpy arrays; ``columns``: the term order for building a configuration's row).
    ``cov_type``: ``COV`` (HC3), or "nonrobust" where a run alone decides a term (its leverage 1 leaves
    HC3 0/0: the classical covariance is the one left)."""

    terms: tuple[str, ...]
    interacting: tuple[int, ...]
    df_resid: int
    params: Any
    cov: Any
    columns: tuple[tuple[tuple[int, int], ...], ...]  # each term: (setting, contrast level) factors; () the intercept
    cov_type: str = COV

    @property
    def p(self) -> int:
        """The estimable columns besides the intercept: Scheffé's p."""
        return sum(1 for c in self.columns if c)

    def predict(self, space: Space, configs: Sequence[Config]) -> Any:
        """The model's log metric for each configuration (numpy array). A column the runs could not
        estimate is not in the model: a configuration's prediction takes it as 0 (``ASSUMPTION``)."""
        return rows_of(space, configs, self.columns) @ self.params

    def contrasts(self, space: Space, reference: Config, alpha: float) -> list[Contrast]:
        """Every configuration of the space against ``reference``, Scheffé-simultaneous at 1 − α."""
        return self.contrasts_of(space, space.configurations, reference, alpha)

    def contrasts_of(self, space: Space, configs: Sequence[Config], reference: Config, alpha: float) -> list[Contrast]:
        """These configurations against ``reference``, each interval the space's Scheffé one (as wide as
        in ``contrasts``: one family with every other contrast of the space)."""
        d = rows_of(space, configs, self.columns) - rows_of(space, [reference], self.columns)
        est = d @ self.params
        se = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", d, self.cov, d), 0.0))
        half = scheffe(self.p, self.df_resid, alpha) * se
        out = []
        for config, e, h in zip(configs, est, half, strict=True):
            low, high = math.exp(e - h), math.exp(e + h)
            worse = low > 1 if space.direction == "lower" else high < 1
            out.append(Contrast(tuple(config), math.exp(e), low, high, worse))
        return out


def terms_of(space: Space, interacting: Sequence[int]) -> list[Term]:
    """Every column of the model before estimability: the intercept, each setting's s − 1 sum-to-zero
    contrasts (``matrix.design.model_matrix``'s coding: level l < s − 1 is +1 at l, −1 at the last
    level), and the products of two ``interacting`` settings' contrasts."""
    mains = [[((a, lv),) for lv in range(len(s.levels) - 1)] for a, s in enumerate(space.settings)]
    terms: list[Term] = [(), *(t for per in mains for t in per)]
    for a, b in itertools.combinations(sorted(set(interacting)), 2):
        terms += [ta + tb for ta in mains[a] for tb in mains[b]]
    return terms


def rows_of(space: Space, configs: Sequence[Config], columns: Sequence[Term]) -> Any:
    """The model's rows of these configurations over ``columns`` (a numpy array, configs × columns)."""
    at = np.asarray(configs, dtype=int).reshape(len(configs), len(space.settings))
    out = np.ones((len(configs), len(columns)))
    for j, term in enumerate(columns):
        for a, level in term:
            last = len(space.settings[a].levels) - 1
            out[:, j] *= (at[:, a] == level).astype(float) - (at[:, a] == last).astype(float)
    return out


def estimable(x: Any) -> list[int]:
    """The columns of ``x`` independent of those before them, in order (as ``model_matrix`` keeps)."""
    kept: list[int] = []
    basis = np.zeros((x.shape[0], 0))
    for j in range(x.shape[1]):
        column = x[:, j]
        residual = column - basis @ (basis.T @ column)
        norm = float(np.linalg.norm(residual))
        if norm > TOLERANCE * max(1.0, float(np.linalg.norm(column))):
            kept.append(j)
            basis = np.column_stack([basis, residual / norm])
    return kept


def term_name(space: Space, term: Term) -> str:
    """A column for people: "intercept", "fs=ext4", "fs=ext4 × gtm.journal=before"."""
    return TIMES.join(f"{space.settings[a].name}={space.settings[a].levels[lv]}" for a, lv in term) or "intercept"


def fit(space: Space, observations: Sequence[Observation], interacting: Sequence[int]) -> SpaceModel | str:
    """The model of the module's docstring on these runs (main effects of every setting, two-setting
    interactions among ``interacting``), or why it cannot be fitted ("not enough data: ...": no run, no
    replicate, a value ≤ 0; a replicate leaves more runs than estimable columns)."""
    import statsmodels.api as sm

    if not observations:
        return "not enough data: no run"
    values = np.array([o.value for o in observations], dtype=float)
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        return "not enough data: a value of 0 or less (or not finite) has no log"
    configs = [o.config for o in observations]
    counts = Counter(configs)
    if max(counts.values()) < 2:
        return "not enough data: no configuration ran twice (the model's error needs replicates)"
    terms = terms_of(space, interacting)
    kept = [terms[j] for j in estimable(rows_of(space, list(counts), terms))]
    x = rows_of(space, configs, kept)
    n, p = x.shape  # p ≤ the configurations that ran < n, with a replicate: the error has n − p ≥ 1 df
    leverage = np.einsum("ij,jk,ik->i", x, np.linalg.pinv(x.T @ x), x)
    cov_type = COV if float(np.max(leverage)) < LEVERAGE else "nonrobust"
    result = sm.OLS(np.log(values), x).fit(cov_type=cov_type)
    cov = np.asarray(result.cov_params())
    if not np.all(np.isfinite(cov)):
        return "not enough data: the runs leave a term's variance undefined"
    names = tuple(term_name(space, t) for t in kept)
    together = tuple(sorted(set(interacting)))
    return SpaceModel(names, together, n - p, np.asarray(result.params), cov, tuple(kept), cov_type)


def setting_effects(
    space: Space, observations: Sequence[Observation], alpha: float, delta: float
) -> list[SettingEffect] | str:
    """Each setting's main effect from a main-effects model on these runs: one row per non-default
    level, all rows one Bonferroni family at 1 − α, words against ±δ; or why not."""
    model = fit(space, observations, ())
    if isinstance(model, str):
        return model
    every = terms_of(space, ())
    ran = rows_of(space, sorted({o.config for o in observations}), every)
    rows = [(a, lv) for a, s in enumerate(space.settings) for lv in range(len(s.levels)) if lv != s.default]
    t = float(stats.t.ppf(1 - alpha / (2 * len(rows)), model.df_resid))
    base = space.baseline
    out = []
    for a, lv in rows:
        other = (*base[:a], lv, *base[a + 1 :])
        s = space.settings[a]
        if not _in_row_space(ran, (rows_of(space, [other], every) - rows_of(space, [base], every))[0]):
            nan = math.nan
            out.append(SettingEffect(s.name, s.levels[lv], s.levels[s.default], nan, nan, nan, "not separated"))
            continue
        d = (rows_of(space, [other], model.columns) - rows_of(space, [base], model.columns))[0]
        est, se = float(d @ model.params), math.sqrt(max(float(d @ model.cov @ d), 0.0))
        low, high = math.exp(est - t * se), math.exp(est + t * se)
        words = words_for(low, high, delta)
        out.append(SettingEffect(s.name, s.levels[lv], s.levels[s.default], math.exp(est), low, high, words))
    return out


def _in_row_space(x: Any, vector: Any) -> bool:
    """Whether ``vector`` is a combination of ``x``'s rows: a contrast the runs estimate."""
    coef = np.linalg.lstsq(x.T, vector, rcond=None)[0]
    return float(np.linalg.norm(x.T @ coef - vector)) <= TOLERANCE * max(1.0, float(np.linalg.norm(vector)))


def scheffe(p: int, df: int, alpha: float) -> float:
    """Scheffé's multiplier sqrt(p · F(1 − α; p, df))."""
    if p < 1 or df < 1:
        raise ValueError(f"Scheffé's multiplier needs p >= 1 and df >= 1, not p={p}, df={df}")
    return math.sqrt(p * float(stats.f.ppf(1 - alpha, p, df)))
