"""Each setting's effect on a group's primary metric, where its configurations differ in two or more
settings of two values each (a full cross, a fraction of one: matrix/design.py, or any cells of them).

**The model.** A linear model on the logs of every passed run, fitted by statsmodels' OLS: the round
(the run's repeat number) as a block, each setting coded −1 (its value in the group's baseline) and +1
(the other value) — sum-to-zero coding, so a setting's coefficient is its effect averaged over the
other settings — and the two-setting interactions the cells resolve. A setting's effect is the ratio
high against low, exp(2β) [exp(2(β − t·se)), exp(2(β + t·se))]; an interaction's is the ratio of the
geometric means of the runs whose two settings are alike (both low or both high) against unlike.

**What the cells resolve.** Terms are taken in order, settings first, then interactions; a term whose
column is a combination of those before it (the cells that ran cannot tell them apart) is not
estimated, and is named beside each estimated term it is aliased with (``aliased_with``). The aliasing is
worked out on the cells that ran, so a failed or missing cell changes it; the missing cells are named.

**Errors.** Replicates give pure error; what the model leaves in the cell means is lack of fit (an F
test of the model against one mean per cell). Standard errors are robust to unequal variances
between cells (the cells' CVs here run 3–16 %): each coefficient is a weighted sum of the runs, so its
variance is the sum over cells of its weights' squares times the cell's own variance, estimated from
the cell's replicates (``COV``, ``cell_errors``: Welch's estimate for a contrast of cell means, made for
any model), with Welch–Satterthwaite degrees of freedom: few when a few noisy cells dominate, the pure
error's when the cells are alike. `python -m fsmatrix.bench.effects` checks the choice by simulation
with mixed CVs (statsmodels' HC3, ``--cov HC3``, held the family error too but cost power: its
leverage correction inflates every variance ~1.9× at these designs' leverages; HC2 with the residual
degrees of freedom did not hold it). Effects and interactions of a group are one family: each interval
at 1 − α/m (Bonferroni over its m terms), so all hold together at 1 − α.

**Words** (δ the answer's minimum effect): *matters* (the interval wholly beyond ±δ), *equivalent*
(wholly inside ±δ, even when it excludes 1), *unsettled* (excludes 1, reaches past ±δ), *not
separated* (holds 1, reaches past ±δ). **Share**: each term's sum of squares over the variation the
block leaves, when the terms' columns are orthogonal (a complete, balanced full cross or regular
fraction), else None.

statsmodels is imported where a model is fitted: the answer of a group without two settings never pays
for it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from fsmatrix.results.store import RunMatrix
from fsmatrix.results.verdict import metrics
from fsmatrix.results.verdict.configurations import Group

COV = "cells"  # each cell's own variance, Welch–Satterthwaite df (cell_errors); or a statsmodels cov_type
WORDS = ("matters", "equivalent", "unsettled", "not separated")
TIMES = " × "
TOLERANCE = 1e-9


@dataclass(frozen=True)
class Run:
    """One passed run: its cell, its settings' levels (−1 low, +1 high, in the fit's factor order), its
    round and its value."""

    cell: str
    levels: tuple[int, ...]
    round: int
    value: float


@dataclass(frozen=True)
class Effect:
    """A setting's effect (``settings`` one name) or a two-setting interaction (two)."""

    settings: tuple[str, ...]
    low: str  # a setting's low value (the baseline's); an interaction: "unlike"
    high: str  # its other value; an interaction: "alike"
    ratio: float  # high against low, averaged over the other settings
    ci_low: float
    ci_high: float
    words: str  # one of WORDS
    share: float | None  # of the variation the block leaves (0..1), where the design is orthogonal
    aliased_with: tuple[str, ...]  # the terms the cells cannot tell from this one

    @property
    def name(self) -> str:
        return TIMES.join(self.settings)

    @property
    def size(self) -> float:
        """|ln ratio|: how far from 1, either way."""
        return abs(math.log(self.ratio))


@dataclass(frozen=True)
class LackOfFit:
    """The model against one mean per cell (and the block): F, its degrees of freedom and p."""

    f: float
    df_model: int
    df_error: int
    p_value: float


@dataclass(frozen=True)
class Effects:
    """A group's effects: the design its cells form, the terms, and how they were decided."""

    # "full" (a full cross of the settings), "fractional" (matrix.json's fraction), "screening" (its
    # Plackett–Burman design: main effects only), "partial"
    kind: str
    runs: int  # cells in the design (the group's cells)
    full_runs: int  # cells of the full cross of its two-level settings
    resolution: int | None  # a fraction's (as matrix.json records it); None for a full cross
    metric: str
    direction: str
    effects: tuple[Effect, ...]  # in the settings' order
    interactions: tuple[Effect, ...]
    missing: tuple[str, ...]  # the group's cells with no usable run (by name; by cell id when none ran)
    reason: str  # "" when fitted; else why not ("not enough data: ...")
    family: int  # m: the terms in the family
    alpha: float
    delta: float
    pure_error_df: int
    lack_of_fit: LackOfFit | None
    # Runs per cell that would settle every term not yet settled (``settle_repeats``); None: all are
    # settled, or nothing was fitted; SETTLE_MAX + 1: more than SETTLE_MAX.
    settle_repeats: int | None = None

    @property
    def fitted(self) -> bool:
        return not self.reason

    def matters(self) -> tuple[Effect, ...]:
        """The settings and interactions that matter, largest first."""
        return tuple(sorted((e for e in (*self.effects, *self.interactions) if e.words == "matters"), key=_largest))


SETTLE_POWER = 0.9  # the share of the time an undecided term would then be settled (below)
SETTLE_MAX = 100  # runs per cell beyond which the advice says "more than"


def settle_repeats(terms: Sequence[Effect], family: int, alpha: float, delta: float, per_cell: float) -> int | None:
    """Runs per cell that would settle each term not yet settled (words "unsettled" or "not
    separated"), ``SETTLE_POWER`` of the time: its interval wholly inside ±δ if the term is 0, wholly
    beyond ±δ if it is 2δ. The standard error shrinks as 1/√runs; it is read back from each interval's
    width at the family's normal critical value (the t's small-sample excess left out: an estimate,
    not a promise). None when every term is settled; SETTLE_MAX + 1 for more than SETTLE_MAX."""
    open_terms = [x for x in terms if x.words in ("unsettled", "not separated") and x.ci_low > 0]
    if not open_terms or per_cell <= 0:
        return None
    crit = float(stats.norm.ppf(1 - alpha / (2 * max(family, 1))))
    push = float(stats.norm.ppf(SETTLE_POWER))
    margin = math.log1p(delta)
    widest = max(math.log(x.ci_high / x.ci_low) / 2 for x in open_terms)  # crit·se of the widest
    needed = math.ceil(per_cell * (widest * (1 + push / crit) / margin) ** 2)
    return min(max(needed, math.ceil(per_cell) + 1), SETTLE_MAX + 1)


def _largest(e: Effect) -> float:
    return -e.size


def words_for(ratio_low: float, ratio_high: float, delta: float) -> str:
    """The interval's words against ±δ (bounds 1/(1+δ) and 1+δ, as the answer's equivalence)."""
    lo, hi = 1 / (1 + delta), 1 + delta
    if lo < ratio_low and ratio_high < hi:
        return "equivalent"
    if ratio_low > hi or ratio_high < lo:
        return "matters"
    if ratio_low > 1 or ratio_high < 1:
        return "unsettled"
    return "not separated"


# ----------------------------------------------------------------------------------- a group


def of_group(
    group: Group, metric: str | None, direction: str, matrix: RunMatrix | None, alpha: float, delta: float
) -> Effects | None:
    """The effects of a speed group whose configurations differ in two or more settings, each of two
    values (a D-optimal design's too: the model it was chosen for); None for any other group."""
    if metric is None or len(group.cells) < 2:
        return None
    varying = list(next(iter(group.settings.values())))
    values = {k: list(dict.fromkeys(group.settings[c.id][k] for c in group.cells)) for k in varying}
    if len(varying) < 2 or any(len(v) != 2 for v in values.values()):
        return None
    base = group.settings[group.baseline.id]
    low = {k: base[k] for k in varying}
    high = {k: next(v for v in values[k] if v != low[k]) for k in varying}
    runs, missing, bad = [], [], False
    for c in group.cells:
        levels = tuple(-1 if group.settings[c.id][k] == low[k] else 1 for k in varying)
        passed = [(d.repeat, metrics.metric_value(d, metric)) for d in c.docs if d.status == "passed"]
        usable = [(r, v) for r, v in passed if v is not None]
        bad = bad or any(v <= 0 for _, v in usable)
        runs += [Run(c.id, levels, r, v) for r, v in usable]
        if not usable:
            missing.append(group.name(c))
    present = {c.id for c in group.cells}
    entries = matrix.cells if matrix is not None else ()
    missing += [e.id for e in entries if e.group == group.key and e.id not in present]  # no run at all
    kind, resolution = _kind(group, varying, matrix)
    cells = len(group.cells) + len(missing) - sum(1 for c in group.cells if group.name(c) in missing)
    head = {
        "kind": kind,
        "runs": cells,
        "full_runs": 2 ** len(varying),
        "resolution": resolution,
        "metric": metric,
        "direction": direction,
        "missing": tuple(missing),
        "alpha": alpha,
        "delta": delta,
    }
    if bad:
        return _unfitted(head, "not enough data: a value of 0 or less has no log")
    result = fit(runs, varying, alpha, delta, max_order=_max_order(kind, matrix))
    if isinstance(result, str):
        return _unfitted(head, result)
    terms, family, pure, lof = result
    named = [_named(t, varying, low, high) for t in terms]
    ran = len({r.cell for r in runs})
    return Effects(
        **head,
        effects=tuple(e for e in named if len(e.settings) == 1),
        interactions=tuple(e for e in named if len(e.settings) == 2),
        reason="",
        family=family,
        pure_error_df=pure,
        lack_of_fit=lof,
        settle_repeats=settle_repeats(named, family, alpha, delta, len(runs) / ran if ran else 0.0),
    )


def _unfitted(head: Mapping[str, Any], reason: str) -> Effects:
    return Effects(
        **head,
        effects=(),
        interactions=(),
        reason=reason,
        family=0,
        pure_error_df=0,
        lack_of_fit=None,
    )


def _max_order(kind: str, matrix: RunMatrix | None) -> int:
    """The model's highest order: main effects only for a Plackett–Burman design (each setting partially
    aliased with many interactions) and for a D-optimal design chosen for the main-effects model (its
    cells were chosen to estimate nothing more); two-setting interactions otherwise."""
    model = matrix.design.get("model") if matrix is not None and matrix.design else None
    return 1 if kind == "screening" or (kind == "optimal" and model == "main") else 2


def _kind(group: Group, varying: list[str], matrix: RunMatrix | None) -> tuple[str, int | None]:
    """A design as matrix.json records it (a fraction or a screening design: its factors the group's
    settings; an optimal design: its axes), a full cross, or other cells."""
    record = matrix.design if matrix is not None else None
    if record and record.get("kind") == "optimal" and set(record.get("axes", ())) == set(varying):
        return "optimal", None
    if record and set(record.get("factors", ())) == set(varying) and record.get("kind") == "screening":
        return "screening", None
    if record and set(record.get("factors", ())) == set(varying):
        resolution = record.get("resolution")
        return "fractional", resolution if isinstance(resolution, int) else None
    cells = {tuple(sorted(group.settings[c.id].items())) for c in group.cells}
    return ("full" if len(cells) == 2 ** len(varying) else "partial"), None


def _named(term: Term, varying: list[str], low: Mapping[str, str], high: Mapping[str, str]) -> Effect:
    settings = tuple(varying[i] for i in term.factors)
    lo, hi = (low[settings[0]], high[settings[0]]) if len(settings) == 1 else ("unlike", "alike")
    aliases = tuple(TIMES.join(varying[i] for i in t) for t in term.aliased_with)
    return Effect(settings, lo, hi, term.ratio, term.ci_low, term.ci_high, term.words, term.share, aliases)


# ----------------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Term:
    """A fitted term on factor indexes: what ``fit`` returns before the names are put on."""

    factors: tuple[int, ...]
    ratio: float
    ci_low: float
    ci_high: float
    words: str
    share: float | None
    aliased_with: tuple[tuple[int, ...], ...]
    log_effect: float  # 2β: ln of the ratio
    se: float  # of 2β


def fit(
    runs: Sequence[Run], factors: Sequence[str], alpha: float, delta: float, cov: str = COV, max_order: int = 2
) -> tuple[list[Term], int, int, LackOfFit | None] | str:
    """The model of the module's docstring on these runs: its terms, the family size m, the pure
    error's degrees of freedom and the lack-of-fit test; or, when it cannot be fitted, why ("not
    enough data: ..."). ``max_order`` 1: the settings alone (a screening design), no interactions."""
    import statsmodels.api as sm
    from scipy import stats as scipy_stats

    if not runs:
        return "not enough data: no passed run"
    k = len(factors)
    y = np.log(np.array([r.value for r in runs]))
    levels = np.array([r.levels for r in runs], dtype=float)
    rounds = sorted({r.round for r in runs})
    fixed = [np.ones(len(runs))] + [np.array([r.round == b for r in runs], dtype=float) for b in rounds[1:]]
    candidates: list[tuple[int, ...]] = [(i,) for i in range(k)]
    if max_order >= 2:
        candidates += [(i, j) for i in range(k) for j in range(i + 1, k)]
    columns = {t: np.prod(levels[:, list(t)], axis=1) for t in candidates}
    kept: list[tuple[int, ...]] = []
    base = np.column_stack(fixed)
    aliases: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for t in candidates:
        trial = np.column_stack([base, *(columns[u] for u in kept), columns[t]])
        if np.linalg.matrix_rank(trial) == trial.shape[1]:
            kept.append(t)
            continue
        # which kept terms it is a combination of: they cannot be told apart from it
        span = np.column_stack([base, *(columns[u] for u in kept)])
        coef, *_ = np.linalg.lstsq(span, columns[t], rcond=None)
        for u, c in zip(kept, coef[base.shape[1] :], strict=True):
            if abs(c) > 1e-6:
                aliases.setdefault(u, []).append(t)
    if not any(len(t) == 1 for t in kept):
        return "not enough data: no setting's effect can be told from the rounds"
    x = np.column_stack([base, *(columns[t] for t in kept)])
    cells = sorted({r.cell for r in runs})
    pure = len(runs) - len(cells) - (len(rounds) - 1)
    if len(runs) - x.shape[1] < 1 or pure < 1:
        return "not enough data: no replicate to measure the spread (one run a cell)"
    m = len(kept)
    first = base.shape[1]
    if cov == COV:
        model = sm.OLS(y, x).fit()
        errors, dfs = cell_errors(y, x, [r.cell for r in runs], base)
    else:
        model = sm.OLS(y, x).fit(cov_type=cov)
        errors, dfs = np.asarray(model.bse, dtype=float), np.full(x.shape[1], float(model.df_resid))
    effect_cols = x[:, first:]
    gram = effect_cols.T @ effect_cols
    orthogonal = bool(np.allclose(effect_cols.T @ base, 0) and np.allclose(gram - np.diag(np.diag(gram)), 0))
    block_fit = sm.OLS(y, base).fit()
    left = float(block_fit.ssr)
    terms = []
    for i, t in enumerate(kept):
        beta, se = float(model.params[first + i]), float(errors[first + i])
        crit = float(scipy_stats.t.ppf(1 - alpha / (2 * m), dfs[first + i]))
        lo, hi = math.exp(2 * (beta - crit * se)), math.exp(2 * (beta + crit * se))
        share = beta**2 * float(effect_cols[:, i] @ effect_cols[:, i]) / left if orthogonal and left > 0 else None
        terms.append(
            Term(
                t,
                math.exp(2 * beta),
                lo,
                hi,
                words_for(lo, hi, delta),
                share,
                tuple(aliases.get(t, ())),
                2 * beta,
                2 * se,
            )
        )
    return terms, m, pure, _lack_of_fit(y, x, runs, base)


def cell_errors(y: Any, x: Any, cells: Sequence[str], base: Any) -> tuple[Any, Any]:
    """Each coefficient's standard error and degrees of freedom, from the cells' own spreads. A
    coefficient is w·y (w its row of x's pseudo-inverse), so its variance is Σ over cells of the
    squares of w on the cell's runs times the cell's variance; each cell's variance is estimated from
    its residuals about the cell means and the block (one mean a cell: lack of fit does not enter), its
    degrees of freedom the cell's replicates' share of that fit's; Welch–Satterthwaite then gives the
    coefficient's degrees of freedom. A cell of one run borrows the pooled variance and its degrees of
    freedom."""
    names = sorted(set(cells))
    member = np.array([names.index(c) for c in cells])
    count = len(names)
    full = np.column_stack([base, *((member == k).astype(float) for k in range(1, count))])
    coef, *_ = np.linalg.lstsq(full, y, rcond=None)
    residual = y - full @ coef
    n = len(y)
    resid_df = n - int(np.linalg.matrix_rank(full))
    runs_of = np.bincount(member, minlength=count)
    cell_df = (runs_of - 1) * resid_df / max(n - count, 1)  # the block's degrees of freedom shared out
    pooled = float(residual @ residual) / max(resid_df, 1)
    lone = cell_df <= 0
    squares = np.bincount(member, weights=residual**2, minlength=count)
    variance = np.where(lone, pooled, squares / np.where(lone, 1, cell_df))
    df_of = np.where(lone, max(resid_df, 1), cell_df)
    weights = np.linalg.pinv(x)  # (coefficients, runs)
    per_cell = np.array([np.bincount(member, weights=w**2, minlength=count) for w in weights]) * variance
    var = per_cell.sum(axis=1)
    spread = (per_cell**2 / df_of).sum(axis=1)
    dfs = np.where(spread > 0, var**2 / np.where(spread > 0, spread, 1), float(max(resid_df, 1)))
    return np.sqrt(var), dfs


def _lack_of_fit(y: Any, x: Any, runs: Sequence[Run], base: Any) -> LackOfFit | None:
    """The model against one mean per cell plus the block: an F test (None when the model already
    has one parameter a cell)."""
    import statsmodels.api as sm

    cells = sorted({r.cell for r in runs})
    dummies = [np.array([r.cell == c for r in runs], dtype=float) for c in cells[1:]]
    full = sm.OLS(y, np.column_stack([base, *dummies])).fit()
    plain = sm.OLS(y, x).fit()
    df_model = int(round(plain.df_resid - full.df_resid))
    if df_model < 1 or full.df_resid < 1:
        return None
    f, p, _ = full.compare_f_test(plain)
    return LackOfFit(float(f), df_model, int(full.df_resid), float(p))
