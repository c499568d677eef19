"""How often ``fsmatrix search`` returns a configuration within δ of the true best, how often its interval
covers the truth, and how many runs it uses, by simulation; beside random search and Optuna's proposer
alone at the same budget. ``python -m fsmatrix.bench.search [--spaces N] [--seed S] [--format md|json] [--quick]``

**Spaces** (bench/search_sim.py): ``--spaces`` seeded spaces of each kind (default 200 a kind, 400 in
all): "holds" (additive main effects plus two-setting interactions among the settings with effects:
the search's model, ``verdict.space.ASSUMPTION``) and "wrong" (a strong three-setting interaction,
unequal noise between configurations, or both: ``search_sim.VARIANTS`` in turn). The i-th space of a
kind takes the CV ``search_sim.CVS[i mod 4]`` (3, 8, 15 % or mixed) and the size band
``search_sim.BANDS[(i div 4) mod 3]`` (< 64, 64–255, 256–2,000 configurations; 5 to 10 settings of 2
to 4 levels). Elapsed time, lower is better; log-normal noise.

**Methods**, each on its own seeded ``SimulatedLab`` of the space:

- **search**: the engine (``fsmatrix.search.stages.run_search``; a parameter of ``simulate`` so that the
  tests run the harness on a stand-in) with ``SearchSettings(delta=DELTA, seed=i)``, no budget (the
  full cross's runs at its repeats); α 5 %. It returns its best and ``observed`` (the best over the
  baseline on the confirmation's fresh runs, Welch at 1 − α); a ``SearchError`` or an answer without
  a best counts as *no answer* (its reason kept in the JSON).
- **random**: at the search's budget B (the runs its lab counted): the baseline ``BASELINE_RUNS``
  runs, then configurations drawn uniformly without replacement, ``RANDOM_REPEATS`` runs each, while
  the budget lasts; the best median returned, with Welch's interval (1 − α, logs) of its ratio to the
  baseline on the same runs (a winner's interval: the selection biases it).
- **optuna**: at budget B, Optuna's ask-and-tell alone (its TPE sampler, seeded; one categorical
  parameter per setting; each trial one run, its log told; the baseline enqueued ``BASELINE_RUNS``
  times first; a configuration the space lacks is told failed and runs nothing). Returned: the best
  mean log among the configurations with at least 2 runs (else the best single run), with Welch's
  interval to the baseline (none for a single run).

**Judged**, per method and space: *within δ*: the true ratio of the returned configuration to the true
best ≤ 1 + δ (δ 5 %); *covers*: its stated interval holds the true ratio of the returned
configuration to the baseline (shares over the spaces with an answer, resp. an interval, with exact
95 % Clopper–Pearson intervals); *runs*: B over the full cross at 3 repeats (the median of a group).
Rows: by kind × CV, by kind × size band, and the wrong spaces by variant. Goals (issue 52): within δ
and covers ≥ 95 % where the model holds; the median runs ≤ 15 % of the full cross from 64
configurations. Deterministic for a seed.

Time: the default 400 spaces, search and both baselines, 54 s on the 2-core build machine
(2026-12-06, a test suite running beside it: docs/measurements.md, "Search by simulation").
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import optuna

from fsmatrix.bench import search_sim
from fsmatrix.bench.search_sim import SimulatedLab, TrueSpace
from fsmatrix.errors import exit_with
from fsmatrix.matrix import SearchSettings
from fsmatrix.results.verdict import stats, welch
from fsmatrix.results.verdict.search import SearchAnswer
from fsmatrix.results.verdict.space import Config, Space
from fsmatrix.search.stages import SearchError, SearchLab, run_search

Engine = Callable[[Space, SearchSettings, SearchLab, float], SearchAnswer]
METHODS = ("search", "random", "optuna")
SPACES = 200  # a kind
QUICK = 12  # a kind, --quick: every CV and band once
DELTA = 0.05
ALPHA = stats.ALPHA
RANDOM_REPEATS = 3
BASELINE_RUNS = 3  # random and optuna measure the baseline first, for their interval's reference


@dataclass(frozen=True)
class Pick:
    """What a method returned on a space: its configuration (None: no answer, with ``reason``) and
    the interval it states for that configuration's ratio to the baseline (None: none)."""

    config: Config | None
    interval: tuple[float, float] | None
    reason: str | None = None
    runs: int = 0  # runs it made (the search's: its lab's count)


@dataclass(frozen=True)
class Judged:
    answered: bool
    within: bool  # the returned configuration within δ of the true best (False without an answer)
    covers: bool | None  # its interval holds the true ratio to the baseline (None: no interval)
    reason: str | None


@dataclass(frozen=True)
class SpaceResult:
    """One space: what it was and how every method did on it."""

    index: int
    kind: str
    cv: str
    variant: str | None
    configurations: int
    settings: int
    runs: int  # the search's runs: every method's budget
    full_cross: int  # configurations × 3
    methods: dict[str, Judged]


def cv_label(cv: float | str) -> str:
    return cv if isinstance(cv, str) else f"{100 * cv:.0f} %"


def welch_ratio(chosen: Sequence[float], base: Sequence[float], alpha: float) -> tuple[float, float] | None:
    """Welch's 1 − α interval of the ratio chosen / base from their runs' logs (None: fewer than 2 a side)."""
    a, b = np.log(np.asarray(base, dtype=float)), np.log(np.asarray(chosen, dtype=float))
    if a.size < 2 or b.size < 2:
        return None
    low, high, _ = welch.intervals(
        np.array(b.mean() - a.mean()),
        np.array(a.var(ddof=1)),
        np.array(a.size),
        np.array(b.var(ddof=1)),
        np.array(b.size),
        alpha,
    )
    return math.exp(float(low)), math.exp(float(high))


def random_search(truth: TrueSpace, budget: int, seed: Sequence[int], alpha: float) -> Pick:
    """Random search at ``budget`` runs (module docstring): the best median, its Welch interval."""
    lab = SimulatedLab(truth, seed)
    base = truth.space.baseline
    runs: dict[Config, list[float]] = {base: [lab.draw(base) for _ in range(min(BASELINE_RUNS, budget))]}
    others = [c for c in truth.space.configurations if c != base]
    for j in lab.rng.permutation(len(others)):
        if lab.runs_used() + RANDOM_REPEATS > budget:
            break
        runs[others[j]] = [lab.draw(others[j]) for _ in range(RANDOM_REPEATS)]
    best = min(runs, key=lambda c: statistics.median(runs[c]))
    return Pick(best, welch_ratio(runs[best], runs[base], alpha), runs=lab.runs_used())


def _ask(study: optuna.Study, space: Space) -> tuple[optuna.trial.Trial, Config]:
    trial = study.ask()
    labels = [trial.suggest_categorical(s.name, list(s.levels)) for s in space.settings]
    return trial, tuple(s.levels.index(str(v)) for s, v in zip(space.settings, labels, strict=True))


def optuna_search(truth: TrueSpace, budget: int, seed: Sequence[int], alpha: float) -> Pick:
    """Optuna's TPE alone at ``budget`` runs (module docstring): its best, the Welch interval."""
    lab = SimulatedLab(truth, seed)
    space = truth.space
    exists = set(space.configurations)
    study = optuna.create_study(
        direction="minimize", sampler=optuna.samplers.TPESampler(seed=int(lab.rng.integers(2**31)))
    )
    for _ in range(BASELINE_RUNS):
        study.enqueue_trial({s.name: s.levels[s.default] for s in space.settings})
    runs: dict[Config, list[float]] = {}
    missing = 0
    while lab.runs_used() < budget and missing <= budget:
        trial, config = _ask(study, space)
        if config not in exists:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            missing += 1
            continue
        value = lab.draw(config)
        runs.setdefault(config, []).append(value)
        study.tell(trial, math.log(value))
    if not runs:
        return Pick(None, None, "no run", lab.runs_used())
    replicated = [c for c in runs if len(runs[c]) >= 2]
    pool = replicated or list(runs)
    best = min(pool, key=lambda c: float(np.mean(np.log(runs[c]))))
    return Pick(best, welch_ratio(runs[best], runs.get(space.baseline, []), alpha), runs=lab.runs_used())


def search_pick(answer: SearchAnswer) -> Pick:
    """The search's answer as a pick: its best and the observed ratio's interval."""
    interval = None if answer.observed is None else (answer.observed.ci_low, answer.observed.ci_high)
    return Pick(answer.best, interval, answer.reason if answer.best is None else None)


def judge(truth: TrueSpace, pick: Pick, delta: float) -> Judged:
    if pick.config is None:
        return Judged(False, False, None, pick.reason or "no answer")
    within = truth.ratio(pick.config, truth.best()) <= 1 + delta + 1e-12
    covers = None
    if pick.interval is not None:
        true = truth.ratio(pick.config, truth.space.baseline)
        covers = pick.interval[0] <= true <= pick.interval[1]
    return Judged(True, within, covers, None)


def trial(index: int, truth: TrueSpace, engine: Engine, seed: int, alpha: float = ALPHA) -> SpaceResult:
    """Every method on one space; the baselines at the search's runs."""
    lab = SimulatedLab(truth, [seed, index, 0])
    try:
        pick = search_pick(engine(truth.space, SearchSettings(delta=DELTA, seed=index), lab, alpha))
    except SearchError as e:
        pick = Pick(None, None, f"SearchError: {e}")
    budget = lab.runs_used()
    picks = {"search": pick}
    if budget > 0:
        picks["random"] = random_search(truth, budget, [seed, index, 1], alpha)
        picks["optuna"] = optuna_search(truth, budget, [seed, index, 2], alpha)
    else:
        picks["random"] = picks["optuna"] = Pick(None, None, "the search ran nothing: no budget")
    space = truth.space
    return SpaceResult(
        index,
        truth.kind,
        cv_label(truth.cv),
        truth.variant,
        len(space.configurations),
        len(space.settings),
        budget,
        space.full_cross_runs(3),
        {m: judge(truth, p, DELTA) for m, p in picks.items()},
    )


def spaces(per_kind: int, seed: int) -> Iterator[tuple[int, TrueSpace]]:
    """The benchmark's spaces (module docstring), each with its index."""
    index = 0
    for k, kind in enumerate(search_sim.KINDS):
        for i in range(per_kind):
            cv = search_sim.CVS[i % len(search_sim.CVS)]
            band = search_sim.BANDS[(i // len(search_sim.CVS)) % len(search_sim.BANDS)]
            variant = search_sim.VARIANTS[(i // 12) % len(search_sim.VARIANTS)] if kind == "wrong" else None
            yield index, search_sim.true_space([seed, k, i], kind, cv, band, variant)
            index += 1


def simulate(per_kind: int, seed: int = 0, engine: Engine = run_search) -> list[SpaceResult]:
    """``per_kind`` spaces of each kind, every method on each (``engine``: the search's)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return [trial(i, truth, engine, seed) for i, truth in spaces(per_kind, seed)]


@dataclass(frozen=True)
class Share:
    """``hits`` of ``n`` with the exact 95 % Clopper–Pearson interval (None for n = 0)."""

    hits: int
    n: int
    ci: tuple[float, float] | None

    @classmethod
    def of(cls, flags: Sequence[bool]) -> Share:
        hits = sum(flags)
        return cls(hits, len(flags), stats.clopper_pearson(hits, len(flags)) if flags else None)


@dataclass(frozen=True)
class Row:
    """A group of spaces (``by``: "kind × CV", "kind × size" or "variant"): its spaces, the search's
    median runs over the full cross at 3 repeats, its no-answers by reason, and per method the share
    within δ (over every space: no answer is a miss) and the share covered (over the intervals)."""

    by: str
    group: str
    n: int
    runs_median: float
    no_answer: dict[str, int]
    within: dict[str, Share]
    covers: dict[str, Share]


def row(by: str, group: str, results: Sequence[SpaceResult]) -> Row:
    no_answer: dict[str, int] = {}
    for r in results:
        reason = r.methods["search"].reason
        if reason is not None:
            no_answer[reason] = no_answer.get(reason, 0) + 1
    return Row(
        by,
        group,
        len(results),
        statistics.median(r.runs / r.full_cross for r in results),
        no_answer,
        {m: Share.of([r.methods[m].within for r in results]) for m in METHODS},
        {m: Share.of([c for r in results if (c := r.methods[m].covers) is not None]) for m in METHODS},
    )


def rows(results: Sequence[SpaceResult]) -> list[Row]:
    """The report's groups, each with at least one space."""
    groups: list[tuple[str, str, list[SpaceResult]]] = []
    for kind in search_sim.KINDS:
        for cv in search_sim.CVS:
            groups.append(
                (
                    "kind × CV",
                    f"{kind}, CV {cv_label(cv)}",
                    [r for r in results if r.kind == kind and r.cv == cv_label(cv)],
                )
            )
        groups.append(("kind × CV", f"{kind}, all", [r for r in results if r.kind == kind]))
    for kind in search_sim.KINDS:
        for low, high in search_sim.BANDS:
            members = [r for r in results if r.kind == kind and low <= r.configurations <= high]
            groups.append(("kind × size", f"{kind}, {low}–{high:,} configurations", members))
    for variant in search_sim.VARIANTS:
        groups.append(("variant", f"wrong: {variant}", [r for r in results if r.variant == variant]))
    return [row(by, group, members) for by, group, members in groups if members]


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.0f} %"


def _share(s: Share) -> str:
    if s.ci is None:
        return "-"
    return f"{_pct(s.hits / s.n)} [{_pct(s.ci[0])}, {_pct(s.ci[1])}]"


def markdown(table: Sequence[Row], results: Sequence[SpaceResult]) -> str:
    head = "| group | n | no answer | runs / full cross (median) |"
    head += "".join(f" {m}: within δ [95 % CI] | {m}: covers [95 % CI] |" for m in METHODS)
    lines = [head, "|" + "---|" * (4 + 2 * len(METHODS))]
    for r in table:
        line = f"| {r.group} | {r.n} | {sum(r.no_answer.values())} | {_pct(r.runs_median)} |"
        line += "".join(f" {_share(r.within[m])} | {_share(r.covers[m])} |" for m in METHODS)
        lines.append(line)
    reasons: dict[str, int] = {}
    for space in results:
        if (reason := space.methods["search"].reason) is not None:
            reasons[reason] = reasons.get(reason, 0) + 1
    lines += [
        "",
        f"{len(results)} spaces; δ = {_pct(DELTA)}, α = {ALPHA:g}; random and optuna at the search's runs of each "
        "space. Within δ over every space (no answer is a miss); covers over the spaces with an interval.",
    ]
    if reasons:
        lines.append(
            "Search without an answer: " + "; ".join(f"{n} × {why}" for why, n in sorted(reasons.items())) + "."
        )
    return "\n".join(lines) + "\n"


def to_json(table: Sequence[Row], results: Sequence[SpaceResult], seed: int) -> dict[str, Any]:
    return {
        "delta": DELTA,
        "alpha": ALPHA,
        "seed": seed,
        "methods": list(METHODS),
        "rows": [asdict(r) for r in table],
        "spaces": [asdict(r) for r in results],
    }


def main(argv: list[str] | None = None, engine: Engine = run_search) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsmatrix.bench.search", description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", type=int, default=SPACES, help=f"spaces of each kind (default {SPACES})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", choices=("md", "json"), default="md")
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK} spaces of each kind: every CV and size band once"
    )
    args = parser.parse_args(argv)
    if args.spaces < 1:
        print(f"fsmatrix.bench.search: error: --spaces {args.spaces}: at least 1", file=sys.stderr)
        return 2
    try:
        results = simulate(QUICK if args.quick else args.spaces, args.seed, engine)
    except NotImplementedError:
        print(
            "fsmatrix.bench.search: error: the search engine (search.stages.run_search) is not implemented here",
            file=sys.stderr,
        )
        return 2
    table = rows(results)
    if args.format == "json":
        print(json.dumps(to_json(table, results, args.seed), indent=1, allow_nan=False))
    else:
        print(markdown(table, results), end="")
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.search")
