"""The answer in sentences: each group's headline and the sentences after it, a crash verdict's
sentence, the race's rule and the advice on what is still open. The verdicts decide
(``verdict/answering.py``); this module only puts their decisions into words, the same words in
Markdown, HTML, JSON and a run's closing lines. How the decisions are made: docs/answer.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fsmatrix.results.render.phrases import (
    baseline_sentence,
    count_are,
    counted,
    lacking_counts,
    open_advice,
    outlier_sentence,
    pooled_sentence,
    race_rule,
    regime_sentence,
    settle_text,
    settle_time,
    stop_words,
    unflushed_sentence,
    why_sentence,
    work_headline,
    work_sentence,
)
from fsmatrix.results.render.words import and_list, join, pct, plain
from fsmatrix.results.verdict import mcb, stats
from fsmatrix.results.verdict.answer import (
    Configuration,
    CrashGroup,
    CrashVerdict,
    GroupResult,
    SpeedGroup,
)
from fsmatrix.results.verdict.crash import UNSAFE


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
    if isinstance(g, CrashGroup):
        return _crash(g)
    return _speed_many(g, delta) if many(g) else _speed(g, delta)


def many(g: SpeedGroup) -> bool:
    """A group too big to name every configuration in its sentences: more than ``mcb.PAIRS_UP_TO``."""
    return len(g.configurations) > mcb.PAIRS_UP_TO


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
    if not g.decided_on_time and g.work is not None and g.decided_on_work:
        headline += work_headline(g.work)
    for name in (n for n in answered if n in g.unsafe):
        label, v = g.unsafe[name]
        headline += f" But {name} is UNSAFE: {unsafe_reason(v)} in {label}; not the answer, whatever its speed."
    headline += _unflushed_headline(g, answered)
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
            f"{settle_text(g.still_open, delta)}{settle_time(g.settle_s)}."
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
    if g.unflushed is not None:
        details.append(unflushed_sentence(g.unflushed))
    details += _context(g, g.metric_words, None)
    if g.still_open:
        details.append(
            "To settle: "
            + "; ".join(
                f"{o.configurations[0]} vs {o.configurations[1]}: {open_advice(o, delta)}" for o in g.still_open
            )
            + "."
        )
    return details


# ----------------------------------------------------------------------------------- many configurations

NAMED = 3  # a big group's sentence names at most this many configurations of a status; it counts the rest


def _speed_many(g: SpeedGroup, delta: float) -> Said:
    """A group of many configurations: a headline of counts that names one configuration at most, and
    sentences that name the few closest to the leader per status and count the rest (the tables and
    the JSON have every one)."""
    by_config = {c.name: c for c in g.configurations}
    eligible = [c for c in g.configurations if c.status != "not enough data"]
    leader, words = g.leader, g.metric_words
    details: list[str] = []
    if g.verdict in ("not enough data", "single"):
        headline = _lacking_headline(g) if leader is None else _speed_headline(g, by_config, eligible, delta)[0]
    else:
        assert leader is not None
        headline = _many_headline(g, by_config, eligible, delta)
        others = [n for n in g.not_separated if n != leader]
        for names, status, text in (
            ([n for n in g.equivalent if n != leader], "equivalent", f"Equivalent within ±{pct(delta)} to"),
            (others, "not separated", "Not separated from"),
            (g.worse, "worse", "Worse than"),
        ):
            if names:
                details.append(f"{text} the leader ({words}, × its): {_few(names, by_config, status)}.")
    answered = (g.best,) if g.best else g.not_separated
    if not g.decided_on_time and g.work is not None and g.decided_on_work:
        headline += work_headline(g.work)
    unsafe_answered = [n for n in answered if n in g.unsafe]
    if unsafe_answered:
        headline += (
            f" But {count_are(len(unsafe_answered))} of them UNSAFE (below): not the answer, whatever its speed."
        )
    headline += _unflushed_headline(g, answered)
    if g.rule == "mcb":
        details.append(mcb_rule(g))
    if g.raced is not None:
        details.append(race_rule(g.raced))
        by_race = [c for c in g.configurations if c.decided_by == "race" and c.status in ("worse", "equivalent")]
        if by_race:
            details.append(f"The race decided {counted(by_race)} (the table below).")
    lacking = [by_config[n] for n in g.not_enough_data]
    if lacking and leader is not None:
        details.append(f"Not enough data: {lacking_counts(lacking)}.")
    unsafe = list(g.unsafe.items())
    if unsafe:
        listed = join([f"{n} in {label}" for n, (label, _) in unsafe[:NAMED]], [n for n, _ in unsafe[:NAMED]])
        more = f" … and {len(unsafe) - NAMED} more" if len(unsafe) > NAMED else ""
        details.append(f"UNSAFE (lost data or did not recover after a crash): {listed}{more}: the crash verdicts.")
    if g.unflushed is not None:
        details.append(unflushed_sentence(g.unflushed, NAMED))
    details += _context(g, words, NAMED)
    if g.still_open:
        details.append(
            f"To settle: {settle_text(g.still_open, delta).removeprefix('; ')} for all {len(g.still_open)} open "
            f"pairs{settle_time(g.settle_s)} (each one's advice: the JSON's still_open)."
        )
    return Said(headline, tuple(details))


def _unflushed_headline(g: SpeedGroup, answered: Sequence[str]) -> str:
    """The headline's warning when an answered configuration sent no flush request where others did."""
    skipped = [n for n in answered if g.unflushed is not None and n in g.unflushed.none]
    if not skipped:
        return ""
    who = and_list(skipped) if len(skipped) <= NAMED else f"{len(skipped)} of them"
    return f" But {who} sent no flush request (below): not the same durability."


def _context(g: SpeedGroup, words: str, named: int | None) -> list[str]:
    """What every speed group's answer says after its decisions: the work where time does not decide,
    the outlier runs, the baseline, the regime and why; the first ``named`` of each list (None: all)."""
    said = [s for s in (pooled_sentence(g.group, named),) if s]
    if g.work is not None and g.work.differences:
        said.append(work_sentence(g.work, words, named))
    if g.outliers:
        said.append(outlier_sentence(g.outliers, words, named))
    said.append(baseline_sentence(g.group.baseline_name, g.group.baseline_rule))
    regime_text = regime_sentence(g.group.regime, named)
    why_text = why_sentence(g.why) if g.why is not None else None
    said += [s for s in (regime_text, why_text) if s]
    return said


def _many_headline(
    g: SpeedGroup, by_config: Mapping[str, Configuration], eligible: Sequence[Configuration], delta: float
) -> str:
    """At most one configuration named (the leader, with its ratio to the baseline), the rest counted."""
    assert g.leader is not None
    runs, words, k = _runs_text([c.runs for c in eligible]), g.metric_words, len(g.configurations)
    counts = [
        f"{len(names)} {text}"
        for names, text in (
            ([n for n in g.equivalent if n != g.leader], f"equivalent within ±{pct(delta)}"),
            (g.worse, "worse"),
            (g.not_enough_data, "without enough data"),
        )
        if names
    ]
    rest = f"; of the others, {and_list(counts)}" if counts else ""
    if g.verdict == "equivalent":
        besides = rest.replace("; of the others", "; besides")
        return (
            f"All {len(eligible)} configurations with enough data of {k} are equivalent within ±{pct(delta)} on "
            f"{words}, {runs}{besides}."
        )
    if g.verdict == "best":
        return f"{g.leader} is best of {k}{_to_baseline(g, by_config)}, {runs}{rest}."
    stop = " (the race stopped undecided: below)" if g.raced is not None and not g.raced.decided else ""
    return (
        f"No single best: {len(g.not_separated)} of {k} configurations not separated on {words}, led by "
        f"{g.leader}{_to_baseline(g, by_config)}, {runs}{rest}{stop}."
    )


def _to_baseline(g: SpeedGroup, by_config: Mapping[str, Configuration]) -> str:
    """ ": takes 0.80× ext4's elapsed time [0.75, 0.85]", or " (the baseline)"."""
    assert g.leader is not None
    base, r = g.group.baseline_name, by_config[g.leader].to_baseline
    if g.leader == base:
        return " (the baseline)"
    if r is None:
        return ""
    whose = f"{base}'s {g.metric_words}" if plain(base) else f"the baseline's {g.metric_words}"
    text = f"{r.ratio:.2f}× {whose} [{r.ci_low:.2f}, {r.ci_high:.2f}]"
    return f" ({'takes ' + text if g.direction == 'lower' else text})"


def _few(names: Sequence[str], by_config: Mapping[str, Configuration], status: str) -> str:
    """The ``NAMED`` closest to the leader with their ratios, then how many more."""

    def distance(n: str) -> float:
        r = by_config[n].to_leader
        return abs(math.log(r.ratio)) if r is not None and r.ratio > 0 else math.inf

    shown = sorted(names, key=distance)[:NAMED]
    listed = _listed(shown, by_config)
    if len(names) <= NAMED:
        return listed
    return f"{listed} … and {len(names) - NAMED} more, all {status}: the table below"


def _lacking_headline(g: SpeedGroup) -> str:
    return (
        f"Not enough data to answer: none of the {len(g.configurations)} configurations has at least "
        f"{stats.MIN_SAMPLES} passed runs, no failed one and no value <= 0: {lacking_counts(g.configurations)}."
    )


def mcb_rule(g: SpeedGroup) -> str:
    """One sentence: how comparisons with the best decided a group (its level read off its intervals)."""
    k = len([c for c in g.configurations if c.status != "not enough data"])
    each = next((c.to_leader.confidence for c in g.configurations if c.to_leader is not None), math.nan)
    together = 1 - (1 - each) * mcb.family(k)
    return (
        f"Rule: comparisons with the best ({k} configurations with enough data, more than {mcb.PAIRS_UP_TO}): each "
        f"interval at {pct(each, 4)}, so that the best's {mcb.family(k)} hold together at {pct(together)}; worse "
        "means separated from every configuration that may be best (docs/answer.md)."
    )


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
        why = f" ({'; '.join(v.not_crashed_why)})" if v.not_crashed_why else ""
        return f"{name}: no verdict, no run crashed and recovered{why}.{aside}"
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
