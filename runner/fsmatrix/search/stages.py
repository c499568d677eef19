"""A search's stages over a ``SearchLab`` (docs/search.md), pure: the lab runs, this decides.

1. **Screen**: a screening design over every setting (Plackett–Burman when every setting has two
   levels, else a D-optimal design for the main-effects model; ``matrix.design``), plus the baseline,
   ``settings.repeats`` runs each. Each setting's main effect (``space.setting_effects``): a setting
   whose every level is *equivalent* to its default within ±δ is fixed at its default.
2. **Refine**: a design over the settings still in, for every setting's main effects and the
   two-setting interactions of those the screening showed to act (``active_settings``: strong effect
   heredity): the model's terms and half as many again (``refine_size``), counting the cells that
   ran, the new ones a D-optimal augmentation of them, within what the budget leaves after the race
   and the confirmation, ``settings.repeats`` runs each. The model on every run so far
   (``space.fit``) predicts every configuration of the space; each is contrasted with the predicted
   best, Scheffé-simultaneous.
3. **Race**: the configurations not shown worse than the predicted best (at most
   ``settings.max_candidates``, the best predicted first), raced (``verdict.race.race_look``'s rule).
4. **Confirm**: ``settings.confirm`` fresh runs of the race's winner and of the baseline, interleaved:
   the observed ratio must fall inside the model's interval for it; where it does not, the model was
   wrong there, and the answer rests on the candidates' own runs alone (no bound on the untried).

**The budget** (``budget_of``): ``budget`` in runs; a time budget in runs through the lab's estimate
(no estimate yet: no limit but the full cross's runs, said in the screen stage's design); none: the
full cross's runs at ``UNLIMITED_REPEATS``. After screening, the confirmation's 2 × ``confirm`` runs
are kept back, then the race's worst case (``max_candidates`` × ``max_repeats``), but never more than
half of what is left after the confirmation's: the rest is the refining stage's (``refine_share``).
The race's last round is ``max_repeats``, or what the budget still pays for (``stats.MIN_SAMPLES`` at
least). A lab may overrun the budget by a race's rounds: the budget is planned, not policed.

**Decisions in detail.** A setting is fixed when every row of its screening effect is *equivalent*;
the others (*matters*, *unsettled*, *not separated*) stay in. The model on the screening and refining
runs has every setting's main effects and the two-setting interactions among the settings still in
that the screening showed to act (some level *matters* or is *unsettled*).
The predicted best is taken over the whole space; the candidates are the subspace's configurations
(fixed settings at their default) not shown worse than it. One candidate is the winner unraced.

**The winner and the baseline.** The confirmation measures the winner and the baseline afresh; the
observed ratio (geometric means, Welch's interval on the logs at 1 − α) must fall inside the model's
Scheffé interval for the same ratio (``model_held``). Where the winner *is* the baseline, there is
nothing to confirm: no confirmation runs; observed and predicted are 1 [1, 1] (a configuration over
itself), ``model_held`` None and a note says the model was not checked — the bound is still the
model's, unchecked. Where the model did not hold, the untried configurations are not bounded
(``untried_bound`` and ``bound_holds`` None, and a note: the candidates were judged on their own runs).

**The untried bound.** For every configuration never run in any stage, the far end of its Scheffé
interval against the winner, turned to "how much better" (> 1: better, in the metric's direction);
the largest is ``untried_bound``; it *holds* when at most 1 + δ. The same family as every other
contrast of the space, so the bound holds with the other intervals at 1 − α, under ``ASSUMPTION``.

Bad input, before any run (``SearchError``, one line naming the key, exit 2 in the CLI): a budget
smaller than the screening stage, a space of one configuration, ``screen_runs`` that no design of the
screening model can have (fewer than its terms; for two-level settings not a multiple of 4, or a
Plackett–Burman size pyDOE does not build)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fsmatrix.matrix import SearchSettings
from fsmatrix.matrix import design as designs
from fsmatrix.results.verdict import power, welch
from fsmatrix.results.verdict.equivalence import pooled_log_sd
from fsmatrix.results.verdict.search import Ratio, SearchAnswer, StageRecord
from fsmatrix.results.verdict.space import (
    ASSUMPTION,
    Config,
    Contrast,
    Observation,
    SettingEffect,
    Space,
    SpaceModel,
    estimable,
    fit,
    rows_of,
    setting_effects,
    terms_of,
)
from fsmatrix.results.verdict.stats import MIN_SAMPLES

UNLIMITED_REPEATS = 3  # no budget: at most the full cross's runs at this many repeats (``full_cross_runs``)


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


# ----------------------------------------------------------------------------------- screening


def screen_plan(space: Space, settings: SearchSettings) -> list[Config]:
    """The screening stage's configurations (the baseline among them), or ``SearchError``."""
    plan, _ = screen_design(space, settings)
    if settings.budget_runs is not None:
        check_budget(settings.budget_runs, f"budget {settings.budget_runs} runs", len(plan), settings.repeats)
    return plan


def screen_design(space: Space, settings: SearchSettings) -> tuple[list[Config], str]:
    """The screening stage's configurations and its design in words (no budget check)."""
    if len(space.configurations) <= 1:
        raise SearchError("search: the space has one configuration; nothing to search")
    made = _plackett_burman(space, settings) if all(len(s.levels) == 2 for s in space.settings) else None
    plan, words = made if made is not None else _optimal_screen(space, settings)
    if space.baseline not in plan:
        plan, words = [*plan, space.baseline], f"{words} and the baseline"
    return plan, words


def pb_rows(factors: Sequence[str], runs: int) -> list[Config]:
    """``matrix.design``'s Plackett–Burman design of ``runs`` over these two-level settings, each row a
    configuration (level 0 the setting's first value, 1 its second); its refusals as ``SearchError``."""

    def fail(message: str, line: int | None) -> Exception:
        return SearchError(f"search: screen_runs {runs}: {message.removeprefix('design: ')}")

    made = designs.screening(designs.DesignSpec("screening", runs=runs), factors, None, fail)
    return [tuple(r) for r in made.rows]


def _plackett_burman(space: Space, settings: SearchSettings) -> tuple[list[Config], str] | None:
    """Every setting two-level: the smallest Plackett–Burman design of more runs than settings (or
    ``screen_runs``); the full cross when that is as large; None when an exclude removed a row of it
    (the D-optimal design then chooses among the configurations that exist)."""
    k = len(space.settings)
    runs = settings.screen_runs or designs.pb_sizes(k + 1)[0]
    if runs % 4:
        raise SearchError(
            f"search: screen_runs {runs} is not a multiple of 4 (a Plackett–Burman design's size: every setting "
            f"has two levels); give screen_runs: {designs.pb_runs(runs)}"
        )
    if runs <= k:
        raise SearchError(
            f"search: screen_runs {runs} takes at most {runs - 1} settings; the space has {k}: give screen_runs: "
            f"{designs.pb_runs(k + 1)} or more"
        )
    if runs >= 1 << k:
        return list(space.configurations), f"full cross of {k} settings, {len(space.configurations)} cells"
    rows = pb_rows([s.name for s in space.settings], runs)
    if not set(rows) <= set(space.configurations):
        return None
    return rows, f"Plackett–Burman, {runs} cells"


def _optimal_screen(space: Space, settings: SearchSettings) -> tuple[list[Config], str]:
    """A D-optimal design for the main-effects model over the configurations that exist: terms +
    max(2, terms // 2) cells (or ``screen_runs``), by ``matrix.design.fedorov``."""
    configs = list(space.configurations)
    x = designs.model_matrix(configs, [len(s.levels) for s in space.settings], "main")
    terms = x.shape[1]
    runs = settings.screen_runs or terms + max(2, terms // 2)
    if runs < terms:
        raise SearchError(
            f"search: screen_runs {runs} is fewer than the main-effects model's {terms} terms over these settings; "
            f"give screen_runs: {terms} or more"
        )
    if runs >= len(configs):
        return configs, f"full cross ({len(configs)} cells: a screening design of {runs} would take them all)"
    chosen = designs.fedorov(x, runs, settings.seed)
    return [configs[i] for i in chosen], f"D-optimal for the main-effects model, {runs} cells"


def check_budget(budget: int, words: str, cells: int, repeats: int) -> None:
    """``SearchError`` when the budget cannot pay for the screening stage."""
    needed = cells * repeats
    if budget < needed:
        raise SearchError(
            f"search: {words} is less than the screening stage's {needed} ({cells} cells × {repeats} repeats); "
            f"give budget: {needed} or more"
        )


def budget_of(space: Space, settings: SearchSettings, lab: SearchLab) -> tuple[int, str, bool]:
    """The budget in runs, in words and whether it limits the search: ``budget_runs``; a time budget
    through ``lab.runs_of`` (no estimate: no limit, said so); none: the full cross's runs at
    ``UNLIMITED_REPEATS``."""
    full = space.full_cross_runs(UNLIMITED_REPEATS)
    if settings.budget_runs is not None:
        return settings.budget_runs, f"budget {settings.budget_runs} runs", True
    if settings.budget_s is not None:
        runs = lab.runs_of(settings.budget_s)
        time = f"{settings.budget_s:g} s"
        if runs is None:
            return (
                full,
                f"budget {time}: no estimate of a run's time yet, so no limit but the full cross's {full} runs",
                False,
            )
        return runs, f"budget {time} (about {runs} runs)", True
    return full, f"no budget: at most the full cross's {full} runs ({UNLIMITED_REPEATS} repeats)", False


# ----------------------------------------------------------------------------------- the stages


@dataclass
class _Search:
    """A search under way: what it was given, its budget and every run and stage so far."""

    space: Space
    settings: SearchSettings
    lab: SearchLab
    alpha: float
    budget: int
    observations: list[Observation] = field(default_factory=list)
    stages: list[StageRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fixed: tuple[SettingEffect, ...] = ()

    def measure(self, stage: str, configs: Sequence[Config], repeats: int, design: str) -> list[Observation]:
        before = self.lab.runs_used()
        got = self.lab.measure(stage, configs, repeats) if configs else []
        self.stages.append(StageRecord(stage, design, len(configs), self.lab.runs_used() - before))
        self.observations += got
        return got

    def left(self) -> int:
        return self.budget - self.lab.runs_used()

    def refine_share(self) -> int:
        """What the refining stage may spend: the budget left after keeping the confirmation's runs
        (2 × ``confirm``) and the race's (its worst case, ``max_candidates`` × ``max_repeats``, but
        at most half of what is left after the confirmation)."""
        s = self.settings
        after_confirm = max(0, self.left() - 2 * s.confirm)
        race = min(s.max_candidates * s.max_repeats, after_confirm // 2)
        return after_confirm - race

    def race(self, candidates: Sequence[Config]) -> Config:
        """The race's winner (``lab.race``; one candidate is the winner unraced). Its last round is
        ``max_repeats``, or fewer where the budget left after the confirmation's runs cannot pay for
        them (never below ``stats.MIN_SAMPLES``: nothing is decided before)."""
        if len(candidates) == 1:
            self.stages.append(StageRecord("race", "one candidate: no race", 1, 0))
            return candidates[0]
        s = self.settings
        rounds = min(s.max_repeats, max(MIN_SAMPLES, (self.left() - 2 * s.confirm) // len(candidates)))
        before = self.lab.runs_used()
        result = self.lab.race(candidates, rounds, s.delta)
        self.observations += result.observations
        how = "decided" if result.decided else "undecided at its last round: the leader"
        design = f"race of {len(candidates)} candidates, at most {rounds} rounds ({how})"
        self.stages.append(StageRecord("race", design, len(candidates), self.lab.runs_used() - before))
        if result.best is None:
            self.notes.append("the race found no best (no candidate passed): the predicted best is taken")
            return candidates[0]
        return result.best

    def answer(self, reason: str, effects: Sequence[SettingEffect] = ()) -> SearchAnswer:
        """The answer of a search that could not finish: why, and what it ran."""
        return SearchAnswer(
            self.space,
            self.settings.delta,
            self.alpha,
            None,
            None,
            None,
            None,
            tuple(effects),
            (),
            (),
            len(_untried(self.space, self.observations)),
            None,
            None,
            ASSUMPTION,
            self.lab.runs_used(),
            self.space.full_cross_runs(UNLIMITED_REPEATS),
            tuple(self.stages),
            reason,
        )


def _untried(space: Space, observations: Sequence[Observation]) -> list[Config]:
    ran = {o.config for o in observations}
    return [c for c in space.configurations if c not in ran]


def fixed_settings(space: Space, effects: Sequence[SettingEffect]) -> list[int]:
    """The settings whose every level is *equivalent* to the default within ±δ (by index)."""
    return [
        a
        for a, s in enumerate(space.settings)
        if all(e.words == "equivalent" for e in effects if e.setting == s.name)
        and any(e.setting == s.name for e in effects)
    ]


def refine_size(terms: int, cells: int) -> int:
    """The cells a refining design takes for a model of ``terms`` columns over a subspace of ``cells``:
    the terms and half as many again (at least 2 more: degrees of freedom for the lack of fit), at
    most the whole subspace. Economy is the point: a search runs what its model needs, not what its
    budget would pay for."""
    return min(cells, terms + max(2, math.ceil(terms / 2)))


def active_settings(space: Space, kept: Sequence[int], effects: Sequence[SettingEffect]) -> list[int]:
    """The ``kept`` settings the screening showed to act (some level *matters* or is *unsettled*: its
    interval excludes 1): the only ones whose two-setting interactions the model has (strong effect
    heredity: an interaction between settings with no effect of their own is not chased)."""
    shown = {e.setting for e in effects if e.words in ("matters", "unsettled")}
    return [a for a in kept if space.settings[a].name in shown]


def refine_plan(
    space: Space,
    active: Sequence[int],
    subspace: Sequence[Config],
    ran: set[Config],
    share: int,
    settings: SearchSettings,
) -> tuple[list[Config], str]:
    """The refining stage's new configurations and design in words, for the model of every setting's
    main effects and the two-setting interactions of the ``active`` ones (the main-effects model when
    the share cannot pay for that) over the subspace: ``refine_size`` cells counting those that ran
    before, the new ones a D-optimal augmentation of them (the subspace's remaining cells when that is
    all of them), at ``repeats`` runs each within ``share`` runs; nothing when the cells that ran
    already carry the model, or when not even the main-effects model is affordable."""
    new = [c for c in subspace if c not in ran]
    if not new:
        return [], "nothing new: every configuration of the refined space ran"
    affordable = share // settings.repeats
    before = [i for i, c in enumerate(subspace) if c in ran]
    for interacting in (active, ()):
        full = rows_of(space, subspace, terms_of(space, interacting))
        x = full[:, estimable(full)]
        model = f"main effects and the interactions of {len(interacting)} settings" if interacting else "main effects"
        wanted = refine_size(x.shape[1], len(subspace)) - len(before)
        if wanted <= 0:
            return [], f"nothing new: the {len(before)} cells run before carry the model of {model}"
        n = min(wanted, affordable)
        if n >= len(new):
            return new, f"the rest of the refined space: {len(new)} cells, for the model of {model}"
        if len(before) + n >= x.shape[1]:
            chosen = designs.fedorov(x, n, settings.seed, before)
            words = f"D-optimal augmentation for the model of {model}: {n} cells beside the {len(before)} run before"
            return [subspace[i] for i in chosen], f"{words}, of {len(subspace)}"
    return [], f"nothing: the budget leaves {affordable} cells, fewer than the main-effects model needs"


def candidates_of(
    space: Space, model: SpaceModel, subspace: Sequence[Config], settings: SearchSettings, alpha: float
) -> list[Contrast]:
    """The race's entrants: the configurations of ``subspace`` not shown worse than the predicted best
    of the whole space (Scheffé), the best predicted first, at most ``max_candidates``; each a
    contrast with that best. None left (the subspace's best shown worse than a best outside it, with
    a fixed setting at another level): the subspace's best predicted alone."""
    predicted = model.predict(space, space.configurations)
    order = np.argsort(predicted if space.direction == "lower" else -predicted, kind="stable")
    best = space.configurations[int(order[0])]
    rows = model.contrasts(space, best, alpha)
    inside = set(subspace)
    ranked = [rows[int(i)] for i in order if rows[int(i)].config in inside]
    kept = [r for r in ranked if not r.shown_worse] or ranked[:1]
    return kept[: settings.max_candidates]


def observed_ratio(observations: Sequence[Observation], config: Config, baseline: Config, alpha: float) -> Ratio | None:
    """``config`` over ``baseline`` on these runs: the ratio of geometric means with Welch's interval on
    the logs at 1 − α; None with fewer than two runs of either."""
    mine = np.log([o.value for o in observations if o.config == config and o.value > 0])
    theirs = np.log([o.value for o in observations if o.config == baseline and o.value > 0])
    if mine.size < 2 or theirs.size < 2:
        return None
    diff = float(np.mean(mine) - np.mean(theirs))
    var_b, var_a = np.array(np.var(mine, ddof=1)), np.array(np.var(theirs, ddof=1))
    low, high, _ = welch.intervals(np.array(diff), var_a, np.array(theirs.size), var_b, np.array(mine.size), alpha)
    return Ratio(math.exp(diff), math.exp(float(low)), math.exp(float(high)))


def settle_repeats(
    observations: Sequence[Observation], config: Config, baseline: Config, delta: float, alpha: float
) -> int | None:
    """The fresh runs of each of ``config`` and ``baseline`` that would settle ±δ at their spread on these
    runs (``power.repeats_needed``, the answer's advice); None: more than its range."""
    mine = [o.value for o in observations if o.config == config and o.value > 0]
    theirs = [o.value for o in observations if o.config == baseline and o.value > 0]
    return power.repeats_needed(pooled_log_sd(mine, theirs), delta, alpha=alpha)


def untried_bound(
    space: Space, model: SpaceModel, winner: Config, untried: Sequence[Config], alpha: float
) -> float | None:
    """The most the model allows any untried configuration to beat ``winner`` by, as a ratio (> 1:
    better, in the metric's direction): the far end of its Scheffé interval against the winner; None
    when nothing is untried."""
    if not untried:
        return None
    rows = model.contrasts_of(space, untried, winner, alpha)
    if space.direction == "lower":
        return max(1 / r.ci_low if r.ci_low > 0 else math.inf for r in rows)
    return max(r.ci_high for r in rows)


def run_search(space: Space, settings: SearchSettings, lab: SearchLab, alpha: float) -> SearchAnswer:
    """The four stages of the module's docstring on ``lab``; the answer."""
    plan, words = screen_design(space, settings)
    budget, budget_words, limited = budget_of(space, settings, lab)
    if limited:
        check_budget(budget, budget_words, len(plan), settings.repeats)
    search = _Search(space, settings, lab, alpha, budget)
    search.measure("screen", plan, settings.repeats, f"{words}; {budget_words}")
    screened = setting_effects(space, search.observations, alpha, settings.delta)
    if isinstance(screened, str):
        return search.answer(f"screening: {screened}")
    fixed = fixed_settings(space, screened)
    kept = [a for a in range(len(space.settings)) if a not in fixed]
    subspace = [c for c in space.configurations if all(c[a] == space.settings[a].default for a in fixed)]
    ran = {o.config for o in search.observations}
    active = active_settings(space, kept, screened)
    new, words = refine_plan(space, active, subspace, ran, search.refine_share(), settings)
    search.measure("refine", new, settings.repeats, words)
    model = fit(space, search.observations, active)
    effects = setting_effects(space, search.observations, alpha, settings.delta)
    rows = tuple(screened if isinstance(effects, str) else effects)
    if isinstance(model, str):
        return search.answer(f"the model: {model}", rows)
    names = {space.settings[a].name for a in fixed}
    search.fixed = tuple(e for e in screened if e.setting in names)
    candidates = candidates_of(space, model, subspace, settings, alpha)
    winner = search.race([c.config for c in candidates])
    return _confirmed(search, model, winner, tuple(candidates), rows)


def _confirmed(
    search: _Search,
    model: SpaceModel,
    winner: Config,
    candidates: tuple[Contrast, ...],
    effects: tuple[SettingEffect, ...],
) -> SearchAnswer:
    """The confirmation of ``winner`` against the baseline, the bound on the untried, the answer."""
    space, s, alpha = search.space, search.settings, search.alpha
    held: bool | None = None
    settle: int | None = None
    observed: Ratio | None
    if winner == space.baseline:
        search.notes.append(
            "the winner is the baseline: no confirmation ran (its ratio to itself is 1 exactly), so the model "
            "was not checked at it"
        )
        observed = predicted = Ratio(1.0, 1.0, 1.0)
    else:
        design = f"{s.confirm} fresh runs of the winner and of the baseline, interleaved"
        got = search.measure("confirm", [winner, space.baseline], s.confirm, design)
        found = observed_ratio(got, winner, space.baseline, alpha)
        c = model.contrasts_of(space, [winner], space.baseline, alpha)[0]
        observed, predicted = found, Ratio(c.ratio, c.ci_low, c.ci_high)
        if found is None:
            search.notes.append(
                "fewer than two confirmation runs of the winner or the baseline passed: the model was not checked"
            )
        else:
            held = c.ci_low <= found.ratio <= c.ci_high
            if found.words(space.direction, s.delta) == "not separated":
                settle = settle_repeats(got, winner, space.baseline, s.delta, alpha)
    untried = _untried(space, search.observations)
    bound = untried_bound(space, model, winner, untried, alpha)
    holds: bool | None = bound is None or bound <= 1 + s.delta
    if held is False:
        bound, holds = None, None
        search.notes.append(
            "the model did not hold at the winner (the observed ratio lies outside its predicted interval): the "
            "candidates were judged on their own runs, and the untried configurations are not bounded"
        )
    return SearchAnswer(
        space,
        s.delta,
        alpha,
        winner,
        observed,
        predicted,
        held,
        effects,
        search.fixed,
        candidates,
        len(untried),
        bound,
        holds,
        ASSUMPTION,
        search.lab.runs_used(),
        space.full_cross_runs(UNLIMITED_REPEATS),
        tuple(search.stages),
        None,
        tuple(search.notes),
        settle,
    )
