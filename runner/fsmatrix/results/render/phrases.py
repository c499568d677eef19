"""Pieces of the answer's sentences that more than one kind of group says (``sentences.py``: a group's
sentences, a big group's in counts): the race's rule, the runs to settle, work, outliers, what differs,
the baseline and the regime, how many lack data."""

from __future__ import annotations

from collections.abc import Sequence

from fsmatrix.results.render.words import and_list, join, pct
from fsmatrix.results.store import Race
from fsmatrix.results.verdict import power, stats
from fsmatrix.results.verdict.answer import Configuration, Open, Why
from fsmatrix.results.verdict.configurations import RULES, Group, Regime
from fsmatrix.results.verdict.groups import Interval
from fsmatrix.results.verdict.outliers import RULE, Outlier
from fsmatrix.results.verdict.outliers import name as outlier_name
from fsmatrix.results.verdict.raced import RacedGroup
from fsmatrix.results.verdict.speed import MIN_WHY_CHANGE
from fsmatrix.results.verdict.work import EQUIVALENT, Unflushed, Work, words_of


def count_are(n: int) -> str:
    return "1 is" if n == 1 else f"{n} are"


def counted(configs: Sequence[Configuration]) -> str:
    """ "20 worse and 3 equivalent": how many of each status."""
    statuses = [c.status for c in configs]
    return and_list([f"{statuses.count(st)} {st}" for st in dict.fromkeys(statuses)])


def lacking_counts(lacking: Sequence[Configuration]) -> str:
    """How many configurations lack what: "30 with 2 passed runs and 2 with a failed run"."""
    kinds: dict[str, int] = {}
    for c in lacking:
        if c.failed:
            kind = "with failed runs"
        elif c.runs < stats.MIN_SAMPLES:
            kind = f"with {c.runs} passed run{'s' if c.runs != 1 else ''}"
        else:
            kind = "with a value <= 0"
        kinds[kind] = kinds.get(kind, 0) + 1
    return and_list([f"{n} {kind}" for kind, n in kinds.items()]) + f" (of the {stats.MIN_SAMPLES} needed)"


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
    return f"the race stopped undecided: {why_stopped(race)}"


def why_stopped(race: Race) -> str:
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


def work_sentence(w: Work, words: str, named: int | None = None) -> str:
    """What the configurations' work per operation shows where time does not (per metric, in the words of
    verdict.work.WORDS; the first ``named`` configurations of each word and how many more, when given)."""
    parts = []
    for d in w.differences:
        listed = [
            *_work_words([(n, _ratio(r)) for n, r in d.more], "more work", named),
            *_work_words([(n, _ratio(r)) for n, r in d.unsettled], "more, size unsettled", named),
            *_work_words(
                [(s.configuration, _ratio(s.against_least)) for s in d.standings if s.words == EQUIVALENT],
                f"equivalent within ±{pct(w.delta)}",
                named,
            ),
        ]
        does = f"do{'es' if len(d.none) == 1 else ''} none"
        least = f"{and_list(list(d.none))} {does}" if d.does_none else f"× {d.least}'s"
        parts.append(f"{d.words} ({least}): {'; '.join(listed)}")
    compared = len(w.compared)
    return (
        f"Work, where {words} does not decide (the same intervals per work metric, {compared} metric"
        f"{'s' if compared != 1 else ''} whose intervals hold together at {pct(w.confidence)}, "
        f"read with a margin of ±{pct(w.delta)}): " + "; ".join(parts) + "."
    )


def work_headline(w: Work) -> str:
    """The headline's words on the work metrics that decided: those showing a difference (the work sentence
    below), and those on which every configuration is equivalent within ±δ (no sentence below)."""
    shown = {d.metric for d in w.differences}
    decided = [words_of(m) for m in w.decided if m in shown]
    same = [words_of(m) for m in w.decided if m not in shown]
    text = f" Decided on work: {and_list(decided)} (below)." if decided else ""
    return text + (f" Equivalent within ±{pct(w.delta)} on {and_list(same)}." if same else "")


def _ratio(r: Interval | None) -> str:
    return f" {r.ratio:.2f}× [{r.ci_low:.2f}, {r.ci_high:.2f}]" if r is not None else ""


def _work_words(shown: Sequence[tuple[str, str]], words: str, named: int | None) -> list[str]:
    """``words`` after the configurations that have them (with their ratios), the first ``named``."""
    if not shown:
        return []
    first = shown[:named] if named is not None else shown
    listed = join([f"{n}{r}" for n, r in first], [n for n, _ in first])
    if len(first) < len(shown):
        listed += f" … and {len(shown) - len(first)} others"  # "5 more more work" read twice
    return [f"{listed} {words}"]


def outlier_sentence(found: Sequence[Outlier], words: str, named: int | None = None) -> str:
    """The runs outside their configuration's spread, named (the first ``named``, when given), and kept
    in every figure."""
    shown = found[:named] if named is not None else found
    listed = join([f"{outlier_name(o)} {o.ratio:.2f}× the median of its other runs" for o in shown])
    if len(shown) < len(found):
        listed += f" … and {len(found) - len(shown)} more"
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
        f"Decided by the race (race.json, {why_stopped(race)})"
        if raced.decided
        else f"Not decided by the race ({stop_words(raced)}); what it did decide stands"
    )
    return (
        f"{head}: a configuration retired when {retired_when(race.retire_margin)}, equivalent when TOST shows it "
        f"within ±{pct(d)}, each test at {level} so "
        f"that all its decisions over every round err with probability at most {pct(race.alpha)}; the intervals "
        "are fixed-sample ones on the runs it stopped at, not adjusted for its stopping."
    )


def baseline_sentence(name: str, rule: str) -> str:
    verb = "Baseline" if rule == "named" else "Baseline chosen"
    return f"{verb}: {name} ({RULES[rule]})."


def regime_sentence(r: Regime, named: int | None = None) -> str | None:
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
        if named is not None and len(r.by_configuration) > named:  # counted, not listed
            regimes = list(r.by_configuration.values())
            counts = [f"{regimes.count(reg)} {words.get(reg, reg)}" for reg in dict.fromkeys(regimes)]
            return f"Regime: {and_list(counts)} configurations (the sampler's class of most of their runs)."
        parts = join([f"{n} {words.get(reg, reg)}" for n, reg in r.by_configuration.items()], list(r.by_configuration))
        return f"Regime: {parts}."
    return None


def settle_text(still_open: Sequence[Open], delta: float) -> str:
    """ "; 7 runs per configuration would settle ±5 %": the most any open pair needs."""
    needed = [o.repeats_needed for o in still_open]
    if not needed:
        return ""
    if any(n is None for n in needed):
        return f"; more than {power.N_MAX} runs per configuration would be needed to settle ±{pct(delta)}"
    return f"; {max(n for n in needed if n is not None)} runs per configuration would settle ±{pct(delta)}"


def settle_time(seconds: float | None) -> str:
    """ " (about 40 min more of runs)": what the runs that would settle it would take."""
    if seconds is None or seconds <= 0:
        return ""
    return f" (about {duration(seconds)} more of runs)"


# ----------------------------------------------------------------------------------- what the runs cannot promise


def unflushed_sentence(u: Unflushed, named: int | None = None) -> str:
    """The configurations that sent no flush request where others did (work.Unflushed); ``named``: name at
    most that many of each side and count the rest."""

    def listed(names: Sequence[str]) -> str:
        shown = names if named is None else names[:named]
        more = len(names) - len(shown)
        return and_list([*shown, f"{more} more"]) if more else and_list(shown)

    runs = and_list([str(n) for n in u.runs]) if named is None or len(u.runs) <= named else "all"
    return (
        f"No flush request: {listed(u.none)} sent the device none (in {runs} runs), where {listed(u.flushing)} did: on "
        "a disk with a volatile write cache, what an fsync acknowledged there can be lost at a power cut unless the "
        "cache is off or power-loss protected (a crash.mode: flush-points run finds no flush point to recover at); "
        "not the same durability, whatever the speed."
    )


def pooled_sentence(group: Group, named: int | None = None) -> str | None:
    """Said where a group's runs come from more than one run (a results root's report): runs of different
    sittings drift, and the intervals then hold that drift (docs/history.md, "Answers never pool history")."""
    runs = sorted({d.run_id for c in group.cells for d in c.docs})
    if len(runs) < 2:
        return None
    shown = runs if named is None else runs[:named]
    more = f" … and {len(runs) - len(shown)} others" if len(shown) < len(runs) else ""
    return (
        f"POOLED: this group's runs come from {len(runs)} runs ({join(shown)}{more}), not one sitting: runs of "
        "different sittings drift, and every interval above holds that drift; report on one run's folder for one "
        "sitting's answer."
    )
