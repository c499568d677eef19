"""The answer in sentences: each group's headline and the sentences after it, a crash verdict's
sentence, the race's rule and the advice on what is still open. The verdicts decide
(``verdict/answering.py``); this module only puts their decisions into words, the same words in
Markdown, HTML, JSON and a run's closing lines. How the decisions are made: docs/answer.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fsmatrix.results.render.words import and_list, join, pct, plain
from fsmatrix.results.store import Race
from fsmatrix.results.verdict import power, stats
from fsmatrix.results.verdict.answer import (
    Configuration,
    CrashGroup,
    CrashVerdict,
    GroupResult,
    Open,
    SpeedGroup,
    Why,
)
from fsmatrix.results.verdict.configurations import RULES, Regime
from fsmatrix.results.verdict.crash import UNSAFE
from fsmatrix.results.verdict.outliers import RULE, Outlier
from fsmatrix.results.verdict.raced import RacedGroup
from fsmatrix.results.verdict.speed import MIN_WHY_CHANGE
from fsmatrix.results.verdict.work import Work
from fsmatrix.results.verdict.work import words_of as work_words


@dataclass(frozen=True)
class Said:
    """A group's sentences: the headline, then the others in the order the reports print them."""

    headline: str
    details: tuple[str, ...]

    @property
    def sentences(self) -> tuple[str, ...]:
        return (self.headline, *self.details)


def said(g: GroupResult, delta: float) -> Said:
    """What the answer says of one group (``delta``: the answer's minimum effect)."""
    return _crash(g) if isinstance(g, CrashGroup) else _speed(g, delta)


# ----------------------------------------------------------------------------------- speed groups


def _speed(g: SpeedGroup, delta: float) -> Said:
    by_config = {c.name: c for c in g.configurations}
    eligible = [c for c in g.configurations if c.status != "not enough data"]
    headline, details = _speed_headline(g, by_config, eligible, delta)
    answered = (
        (g.best,)
        if g.best
        else g.not_separated
        if g.not_separated
        else tuple(c.name for c in eligible)
        if g.verdict == "equivalent"
        else ()
    )
    if not g.decided_on_time and g.decided_on_work:
        decided = and_list([work_words(m) for m in g.decided_on_work])
        headline += f" Decided on work: {decided} (below)."
    for name in (n for n in answered if n in g.unsafe):
        label, v = g.unsafe[name]
        headline += f" But {name} is UNSAFE: {unsafe_reason(v)} in {label}; not the answer, whatever its speed."
    details += _speed_details(g, by_config, answered, delta)
    return Said(headline, tuple(details))


def _speed_headline(
    g: SpeedGroup, by_config: Mapping[str, Configuration], eligible: Sequence[Configuration], delta: float
) -> tuple[str, list[str]]:
    """The headline, and the sentences that belong right after it (who is equivalent to or not separated
    from the leader)."""
    runs = _runs_text([c.runs for c in eligible] or [0])
    leader, words = g.leader, g.metric_words
    details: list[str] = []
    if leader is None:
        why_not = "; ".join(f"{c.name}: {c.runs} of {c.runs + c.failed} runs passed" for c in g.configurations)
        return (
            f"Not enough data to answer: no configuration has at least {stats.MIN_SAMPLES} passed runs, no "
            f"failed one and no value <= 0 ({why_not}).",
            details,
        )
    if g.verdict == "single":
        only = by_config[leader]
        figures = f"median {words} {_num(only.median or math.nan)}, {only.runs} runs"
        if len(g.group.cells) == 1:
            return f"Only one configuration ({only.name}): nothing to compare; {figures}.", details
        return f"Only {only.name} has enough data: nothing to compare it with; {figures}.", details
    if g.verdict == "not separated":
        stop = f" ({stop_words(g.raced)})" if g.raced is not None and not g.raced.decided else ""
        headline = (
            f"No single best: {and_list(g.not_separated)} are not separated on {words}, {runs}{stop}"
            f"{_settle_text(g.still_open, delta)}{_settle_time(g.settle_s)}."
        )
        others = [n for n in g.not_separated if n != leader]
        if others:
            details.append(f"Not separated from {leader} ({words}, × {leader}'s): {_listed(others, by_config)}.")
        return headline, details
    if g.verdict == "equivalent":
        headline = f"{and_list([c.name for c in eligible])} are equivalent within ±{pct(delta)} on {words}, {runs}."
        listed = _listed([n for n in g.equivalent if n != leader], by_config)
        details.append(f"Equivalent within ±{pct(delta)} to {leader} ({words}, × {leader}'s): {listed}.")
        return headline, details
    base, lead = g.group.baseline_name, by_config[leader]
    if leader == base or lead.to_baseline is None:
        headline = f"{leader}{' (the baseline)' if leader == base else ''} is best on {words}, {runs}."
    else:
        r = lead.to_baseline
        whose = f"{base}'s {words}" if plain(base) else f"the {words} of {base}"
        text = f"{r.ratio:.2f}× {whose} [{r.ci_low:.2f}, {r.ci_high:.2f}]"
        headline = f"{leader} is best: {'takes ' + text if g.direction == 'lower' else text}, {runs}."
    if g.equivalent:
        details.append(
            f"Equivalent within ±{pct(delta)} to {leader} ({words}, × {leader}'s): {_listed(g.equivalent, by_config)}."
        )
    return headline, details


def _speed_details(
    g: SpeedGroup, by_config: Mapping[str, Configuration], answered: Sequence[str], delta: float
) -> list[str]:
    """The sentences after those about the leader: the worse, the race, the unsafe, the baseline, the
    regime, why, and what would settle the rest."""
    leader, words = g.leader, g.metric_words
    details: list[str] = []
    if g.worse and leader is not None:
        details.append(f"Worse than {leader} ({words}, × {leader}'s): {_listed(g.worse, by_config)}.")
    if g.raced is not None:
        details.append(race_rule(g.raced))
        for conf in g.configurations:
            if conf.decided_by == "race" and conf.status in ("worse", "equivalent"):
                details.append(f"{conf.name}: {conf.status} {conf.reason}.")
    if g.not_enough_data and leader is not None:
        details.append("Not enough data: " + "; ".join(f"{n} ({by_config[n].reason})" for n in g.not_enough_data) + ".")
    for name, (label, v) in g.unsafe.items():
        if name not in answered:
            details.append(f"UNSAFE: {name}: {unsafe_reason(v)} in {label}; not an answer, whatever its speed.")
    if g.work is not None and g.work.differences:
        details.append(work_sentence(g.work, g.metric_words))
    if g.outliers:
        details.append(outlier_sentence(g.outliers, g.metric_words))
    details.append(baseline_sentence(g.group.baseline_name, g.group.baseline_rule))
    regime_text = regime_sentence(g.group.regime)
    if regime_text:
        details.append(regime_text)
    why_text = why_sentence(g.why) if g.why is not None else None
    if why_text:
        details.append(why_text)
    if g.still_open:
        details.append(
            "To settle: "
            + "; ".join(
                f"{o.configurations[0]} vs {o.configurations[1]}: {open_advice(o, delta)}" for o in g.still_open
            )
            + "."
        )
    return details


def _runs_text(counts: Sequence[int]) -> str:
    lo, hi = min(counts), max(counts)
    if lo == hi:
        return f"{lo} run{'s' if lo != 1 else ''} each"
    return f"{lo}-{hi} runs each"


def _num(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _listed(names: Sequence[str], by_config: Mapping[str, Configuration]) -> str:
    """ "a 1.53× [1.25, 1.75], b 2.10× [...]": each one against the leader."""
    parts = []
    for n in names:
        r = by_config[n].to_leader
        parts.append(n if r is None else f"{n} {r.ratio:.2f}× [{r.ci_low:.2f}, {r.ci_high:.2f}]")
    return join(parts, names)


def _settle_text(still_open: Sequence[Open], delta: float) -> str:
    """ "; 7 runs per configuration would settle ±5 %": the most any open pair needs."""
    needed = [o.repeats_needed for o in still_open]
    if not needed:
        return ""
    if any(n is None for n in needed):
        return f"; more than {power.N_MAX} runs per configuration would be needed to settle ±{pct(delta)}"
    return f"; {max(n for n in needed if n is not None)} runs per configuration would settle ±{pct(delta)}"


def _settle_time(seconds: float | None) -> str:
    """ " (about 40 min more of runs)": what the runs that would settle it would take."""
    if seconds is None or seconds <= 0:
        return ""
    return f" (about {duration(seconds)} more of runs)"


def duration(seconds: float) -> str:
    """A time for people: "45 s", "12 min", "2.5 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def stop_words(raced: RacedGroup) -> str:
    """Why a race ended before deciding a group."""
    race = raced.race
    reason = race.stopped.reason if race.stopped is not None else None
    if reason == "budget" and race.settings.budget_s is not None:
        return f"the race stopped at its {duration(race.settings.budget_s)} budget after round {len(race.rounds)}"
    if reason == "max_repeats":
        return f"the race reached its last round, {len(race.rounds)}, undecided"
    return f"the race stopped undecided: {_why_stopped(race)}"


def _why_stopped(race: Race) -> str:
    return race.stopped.why if race.stopped is not None else "stopped"


def open_advice(o: Open, delta: float) -> str:
    """What would settle a pair not separated within ±``delta``."""
    runs_a, runs_b = o.runs
    now = f"{runs_a} each now" if runs_a == runs_b else f"{runs_a} and {runs_b} now"
    sigma = f"σ of the logs {pct(o.sigma, 2)}"
    if o.repeats_needed is None:
        return (
            f"more than {power.N_MAX} runs per configuration would be needed to settle ±{pct(delta)} ({sigma}; {now})"
        )
    return (
        f"{o.repeats_needed} runs per configuration would settle ±{pct(delta)}: equivalent if equal, separated if "
        f"{pct(delta)} apart, {pct(power.TARGET)} of the time each ({sigma}; {now})"
    )


def work_sentence(w: Work, words: str) -> str:
    """What the configurations' work per operation separates where time does not."""
    parts = []
    for d in w.differences:
        listed = join(
            [f"{n} {r.ratio:.2f}× [{r.ci_low:.2f}, {r.ci_high:.2f}]" for n, r in d.more], [n for n, _ in d.more]
        )
        parts.append(f"{d.words} (× {d.least}'s): {listed}")
    compared = len(w.compared)
    return (
        f"Work, where {words} does not decide (the same rule per work metric, {compared} metric"
        f"{'s' if compared != 1 else ''} whose intervals hold together at {pct(w.confidence)}): "
        + "; ".join(parts)
        + "."
    )


def outlier_sentence(found: Sequence[Outlier], words: str) -> str:
    """The runs outside their configuration's spread, named, and kept in every figure."""
    listed = join([f"{o.configuration} r{o.repeat} {o.ratio:.2f}× the median of its other runs" for o in found])
    return f"Outlier runs on {words} ({RULE}; kept in every figure above): {listed}."


def why_sentence(why: Why) -> str | None:
    if not why.measured:
        return None
    if not why.factors:
        return (
            f"What differs, {why.best} against {why.against}: none of the {why.measured} resource metrics "
            f"by {pct(MIN_WHY_CHANGE)} or more."
        )
    parts = [f"{f.words} {f.ratio:.2f}×" + ("" if f.significant else " (not significant)") for f in why.factors]
    return f"What differs, {why.best} against {why.against} (ratio of medians): {', '.join(parts)}."


def retired_when(margin: float) -> str:
    """The race's retire test in words (races before 2026-12-03 retired only beyond δ)."""
    if margin:
        shifted = f"one-sided Welch's t on logs shifted by ln(1 + {margin:g})"
        return f"worse than the best by more than {pct(margin)} ({shifted})"
    return "shown worse than the best (one-sided Welch's t on logs)"


def race_rule(raced: RacedGroup) -> str:
    """One sentence: how the race decided a group."""
    level = (
        f"Pocock's level α' = {raced.look_alpha:.2g} per test"
        if raced.look_alpha is not None
        else ("Pocock's level per test")
    )
    race = raced.race
    d = race.settings.delta
    head = (
        f"Decided by the race (race.json, {_why_stopped(race)})"
        if raced.decided
        else f"Not decided by the race ({stop_words(raced)}); what it did decide stands"
    )
    return (
        f"{head}: a configuration retired when {retired_when(race.retire_margin)}, equivalent when TOST shows it "
        f"within ±{pct(d)}, each test at {level} so "
        f"that all its decisions over every round err with probability at most {pct(race.alpha)}; the intervals "
        "are fixed-sample ones on the runs it stopped at, not adjusted for its stopping."
    )


# ----------------------------------------------------------------------------------- the group's setting


def baseline_sentence(name: str, rule: str) -> str:
    verb = "Baseline" if rule == "named" else "Baseline chosen"
    return f"{verb}: {name} ({RULES[rule]})."


def regime_sentence(r: Regime) -> str | None:
    if r.overall == "cpu":
        text = "Regime: every configuration was CPU-bound (the sampler's class of most of its runs)"
        if r.disks_not_bottleneck:
            text += (
                ": the disks were not the bottleneck, so these differences are the storage stacks' CPU "
                "cost, not their disks' speed"
            )
        return text + "."
    if r.overall == "io":
        return (
            "Regime: every configuration was IO-bound (the sampler's class of most of its runs): the device "
            "set the pace."
        )
    if r.overall == "mixed":
        return "Regime: every configuration was mixed, neither CPU- nor IO-bound most of the time."
    if r.overall == "varies":
        words = {"cpu": "CPU-bound", "io": "IO-bound", "mixed": "mixed", "": "unknown"}
        parts = join([f"{n} {words.get(reg, reg)}" for n, reg in r.by_configuration.items()], list(r.by_configuration))
        return f"Regime: {parts}."
    return None


# ----------------------------------------------------------------------------------- crash groups


def _crash(g: CrashGroup) -> Said:
    verdicts = g.crash
    parts = []
    unsafe = [v.configuration for v in verdicts if v.verdict == "unsafe"]
    by_design = [v for v in verdicts if v.verdict == "unsafe by design"]
    safe = [v.configuration for v in verdicts if v.verdict == "safe"]
    undecided = [v.configuration for v in verdicts if v.verdict == "no verdict"]
    if unsafe:
        parts.append(f"UNSAFE: {and_list(unsafe)} (a loss or damage its settings promise not to have)")
    if by_design:
        allows = sorted({a for v in by_design for a in v.allowed_by})
        names = [v.configuration for v in by_design]
        parts.append(f"UNSAFE by design: {and_list(names)} ({', '.join(allows)} allows it)")
    if safe:
        parts.append(f"recovered from every crash: {and_list(safe)}")
    if undecided:
        parts.append(f"no verdict: {and_list(undecided)}")
    headline = f"Crash verdict ({g.mode}): " + "; ".join(parts) + "."
    details = [crash_text(v) for v in verdicts]
    details.append(baseline_sentence(g.group.baseline_name, g.group.baseline_rule))
    return Said(headline, tuple(details))


def _lost_words(v: CrashVerdict) -> str:
    of = f" of {v.acknowledged:,}" if v.acknowledged is not None else ""
    return f"lost {v.lost_commits or 0:,}{of} acknowledged commits in {v.lost_runs} of {v.runs} runs"


def unsafe_reason(v: CrashVerdict) -> str:
    """Why a configuration is UNSAFE, for the speed groups where its settings appear."""
    parts = []
    if v.lost_runs:
        parts.append(_lost_words(v))
    if v.not_recovered:
        parts.append(f"did not recover in {v.not_recovered} of {v.runs} runs")
    text = " and ".join(parts) + " after a crash"
    if v.verdict == "unsafe by design":
        text += f" (by design: {', '.join(v.allowed_by)} allows it)"
    return text


def crash_text(v: CrashVerdict) -> str:
    """One configuration's crash verdict in a sentence or two."""
    times = []
    if v.recovery_s is not None:
        times.append(f"recovery {v.recovery_s:.3g} s")
    if v.mount_s is not None:
        times.append(f"mount {v.mount_s:.3g} s")
    timing = f"; {', '.join(times)} (medians)" if times else ""
    aside = ""
    if v.infrastructure or v.not_crashed:
        bits = []
        if v.infrastructure:
            bits.append(
                f"{v.infrastructure} ended in an infrastructure failure ({', '.join(v.infrastructure_statuses)})"
            )
        if v.not_crashed:
            bits.append(f"{v.not_crashed} never crashed")
        aside = f" Not counted: {' and '.join(bits)}: no verdict on the configuration."
    name = v.configuration
    if v.verdict == "safe":
        lost = f", no acknowledged commit lost (0 of {v.acknowledged:,})" if v.acknowledged is not None else ""
        return f"{name}: recovered in {v.recovered} of {v.runs} runs{lost}{timing}.{aside}"
    if v.verdict == "no verdict":
        return f"{name}: no verdict, no run crashed and recovered.{aside}"
    return f"{name}: {_unsafe_text(v)}{timing}.{aside}"


def _unsafe_text(v: CrashVerdict) -> str:
    assert v.verdict in UNSAFE
    parts = []
    if v.lost_runs:
        parts.append(_lost_words(v))
    if v.not_recovered:
        parts.append(f"did not recover in {v.not_recovered} of {v.runs} runs ({'; '.join(v.problems)})")
    what = " and ".join(parts)
    if v.verdict == "unsafe by design":
        return f"UNSAFE by design: {what}; {', '.join(v.allowed_by)} allows that"
    promise = (
        "its settings (synchronous_commit and fsync on) promise to keep every acknowledged commit"
        if v.lost_runs and not v.allowed_by
        else "nothing in its settings allows that"
    )
    if v.not_recovered and not v.damage_allowed and v.allowed_by:
        promise = f"{', '.join(v.allowed_by)} allows losing the last commits, not a damaged database"
    return f"UNSAFE: {what}; {promise}"
