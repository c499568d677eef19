"""Speed verdicts (a group without a crash block), on the workload's primary metric in its declared
direction: the best, the configurations not separated from it, the clearly worse, and why.

``groups.compare_group`` decides (the best median; each other configuration compared with it,
Holm-adjusted; tied = not "slower" after the correction) and each configuration's ratio to the
baseline comes with its 95 % bootstrap interval. A best with no tie is *fastest*; a best with ties is
not: the tied ones are named together, in the group's order, never ranked. Each configuration's
regime (the sampler's class of most of its runs); when every configuration was CPU-bound and the
group compares storage, the answer says the disks were not the bottleneck. The secondary metrics
(``SECONDARY``) whose medians differ most between the best and the baseline (else the clearly worse
one furthest behind), by |ln ratio|, at most ``MAX_WHY`` and only those that differ by
``MIN_WHY_CHANGE`` or more. Still open (``power.still_open``): each tied pair is "equivalent within
±δ" (TOST, Holm across the group's tied pairs) or gets n*, the runs per configuration that would
detect δ with 80 % power.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from fsmatrix.agent import workloads
from fsmatrix.results.verdict import groups, metrics, power, stats
from fsmatrix.results.verdict.answer import Configuration, CrashVerdict, Factor, GroupResult, Open, Ratio, Why
from fsmatrix.results.verdict.configurations import (
    _baseline,
    _baseline_sentence,
    _Cell,
    _fingerprint,
    _names,
    _regime,
    _regime_sentence,
)
from fsmatrix.results.verdict.crash import _unsafe_reason
from fsmatrix.results.verdict.words import _and, _cap, _join, _pct, _plain

MAX_WHY = 3  # secondary metrics named as the reason, at most


MIN_WHY_CHANGE = 0.05  # a secondary metric whose medians differ by less than 5 % is no reason


# The metrics that say why one configuration beats another (all lower-is-cheaper resource counts),
# with the words the answer uses for them.
SECONDARY = {
    "device_write_bytes_per_op": "device bytes written per operation",
    "device_read_bytes_per_op": "device bytes read per operation",
    "device_ios_per_op": "device IO requests per operation",
    "fsyncs_per_s": "fsyncs per second",
    "device_busy_pct": "device busy %",
    "cpu_busy_s": "CPU seconds",
    "cpu_system_s": "kernel CPU seconds",
    "cpu_iowait_s": "IO-wait seconds",
    "worker_cpu_s": "worker CPU seconds",
}


SHORT_METRIC = {"tps": "TPS", "iops": "IOPS"}  # the words for a metric where its title is long


def _metric(kind: str, cells: Sequence[_Cell]) -> tuple[str | None, str, str]:
    """The workload's primary metric, its words and its direction (the first key metric of an
    unregistered workload)."""
    if kind in workloads.WORKLOADS:
        m = workloads.get(kind).primary_metric
        title = m.title.split(" (")[0]
        return m.name, SHORT_METRIC.get(m.name, title[:1].lower() + title[1:]), m.better
    for c in cells:
        for d in c.docs:
            for name, direction in d.key_metrics.items():
                return str(name), str(name), str(direction)
    return None, "", "lower"


def _values(c: _Cell, metric: str) -> list[float | None]:
    """The metric per run: a failed run (or a passed one without it) is None; skipped runs left out."""
    out: list[float | None] = []
    for d in c.docs:
        if d.status == "skipped":
            continue
        value = metrics.metric_value(d, metric) if d.status == "passed" else None
        out.append(value)
    return out


def _runs_text(counts: Sequence[int]) -> str:
    lo, hi = min(counts), max(counts)
    if lo == hi:
        return f"{lo} run{'s' if lo != 1 else ''} each"
    return f"{lo}-{hi} runs each"


def _num(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _why(best: _Cell, against: _Cell, names: Mapping[str, tuple[str, dict[str, str]]], primary: str) -> Why:
    factors = []
    measured = 0
    for metric, words in SECONDARY.items():
        if metric == primary:
            continue
        a, b = metrics.metric_values(best.docs, metric), metrics.metric_values(against.docs, metric)
        if not a or not b:
            continue
        measured += 1
        ma, mb = stats.median(a), stats.median(b)
        if ma <= 0 or mb <= 0:
            continue
        ratio = ma / mb
        if abs(math.log(ratio)) < math.log1p(MIN_WHY_CHANGE):
            continue
        c = stats.compare_samples(b, a, "lower")
        factors.append(Factor(metric, words, ratio, ma, mb, c.verdict in ("faster", "slower")))
    factors.sort(key=lambda f: -abs(math.log(f.ratio)))
    return Why(names[best.id][0], names[against.id][0], measured, tuple(factors[:MAX_WHY]))


def _why_sentence(why: Why) -> str | None:
    if not why.measured:
        return None
    if not why.factors:
        return (
            f"What differs, {why.best} against {why.against}: none of the {why.measured} resource metrics "
            f"by {_pct(MIN_WHY_CHANGE)} or more."
        )
    parts = [f"{f.words} {f.ratio:.2f}×" + ("" if f.significant else " (not significant)") for f in why.factors]
    return f"What differs, {why.best} against {why.against} (ratio of medians): {', '.join(parts)}."


def _ratio_phrase(ratio: Ratio, base: str, words: str, direction: str) -> str:
    whose = f"{base}'s {words}" if _plain(base) else f"the {words} of {base}"
    text = f"{ratio.value:.2f}× {whose} [{ratio.ci_low:.2f}, {ratio.ci_high:.2f}]"
    return f"takes {text}" if direction == "lower" else text


def _speed_group(
    key: str,
    members: list[_Cell],
    has_matrix: bool,
    rule_of_matrix: Any,
    unsafe_elsewhere: Mapping[tuple[tuple[str, str], ...], tuple[str, CrashVerdict]],
    *,
    delta: float,
    alpha: float,
    draws: int,
    seed: int,
) -> GroupResult:
    kind = str(members[0].docs[0].workload)
    label = members[0].group_label
    names = _names(members)
    name_of = {c.id: names[c.id][0] for c in members}
    by_name = {name_of[c.id]: c for c in members}
    metric, words, direction = _metric(kind, members)
    base_cell, rule = _baseline(members, has_matrix, rule_of_matrix)
    base = name_of[base_cell.id]
    reg = _regime(members, names)
    values = {name_of[c.id]: _values(c, metric) for c in members} if metric else {}
    ga = groups.compare_group(values, direction, baseline=base, alpha=alpha, seed=seed) if metric else None
    unsafe = {
        name_of[c.id]: unsafe_elsewhere[_fingerprint(c.flat)]
        for c in members
        if _fingerprint(c.flat) in unsafe_elsewhere
    }
    configs = []
    for c in members:
        name = name_of[c.id]
        s = ga.standing(name) if ga else None
        passed = metrics.metric_values(c.docs, metric) if metric else []
        ratio = None
        if s is not None and s.to_baseline is not None:
            tb = s.to_baseline
            ratio = Ratio(tb.ratio, tb.ci_low, tb.ci_high, tb.confidence)
        configs.append(
            Configuration(
                name=name,
                cell=c.id,
                settings=names[c.id][1],
                status=s.status if s else "not enough data",
                runs=len(passed),
                failed=sum(1 for d in c.docs if d.status != "skipped") - len(passed),
                median=stats.median(passed) if passed else None,
                to_baseline=ratio,
                p_holm=None if s is None or math.isnan(s.p_holm) else s.p_holm,
                test=s.against_best.test if s is not None and s.against_best is not None else None,
                regime=reg.by_configuration[name],
                unsafe=name in unsafe,
            )
        )
    by_config = {c.name: c for c in configs}
    leader = ga.best if ga else None
    tied_with = ga.tied if ga else ()
    worse = ga.worse if ga else ()
    lacking = ga.with_status("not enough data") if ga else tuple(by_config)
    details: list[str] = []
    fastest = None
    tied: tuple[str, ...] = ()
    if leader is None:
        verdict = "not enough data"
        why_not = "; ".join(f"{c.name}: {c.runs} of {c.runs + c.failed} runs passed" for c in configs)
        headline = (
            f"Not enough data to answer: no configuration has at least {stats.MIN_SAMPLES} passed runs and no "
            f"failed one ({why_not})."
        )
    elif not tied_with and not worse:
        verdict = "single"
        only = by_config[leader]
        figures = f"median {words} {_num(only.median or math.nan)}, {only.runs} runs"
        if len(members) == 1:
            headline = f"Only one configuration ({only.name}): nothing to compare; {figures}."
        else:
            headline = f"Only {only.name} has enough data: nothing to compare it with; {figures}."
    elif tied_with:
        verdict = "tie"
        tied = tuple(n for n in by_config if n == leader or n in tied_with)
        runs = _runs_text([by_config[n].runs for n in tied])
        headline = (
            f"No single fastest: {_and(tied)} are tied on {words} (the test cannot tell them apart after "
            f"Holm's correction), {runs}."
        )
        ratios = [f"{n} {r.text()}" for n in tied if n != base and (r := by_config[n].to_baseline) is not None]
        if ratios:
            details.append(f"{_cap(words)} relative to {base}: {_join(ratios, tied)}.")
    else:
        verdict = "fastest"
        fastest = leader
        best = by_config[leader]
        others = [by_config[n] for n in by_config if n != leader and by_config[n].status != "not enough data"]
        runs = _runs_text([best.runs, *(o.runs for o in others)])
        if leader == base:
            than = "every other configuration" + (" with enough data" if lacking else "")
            headline = f"{leader} (the baseline) is fastest, better on {words} than {than}, {runs}."
        elif best.to_baseline is not None:
            headline = f"{leader} is fastest: {_ratio_phrase(best.to_baseline, base, words, direction)}, {runs}."
        else:
            headline = f"{leader} is fastest, {runs}; no ratio to the baseline {base}: it has not enough data."
    answered = (fastest,) if fastest else tied
    for name in (n for n in answered if n in unsafe):
        group_label, v = unsafe[name]
        headline += f" But {name} is UNSAFE: {_unsafe_reason(v)} in {group_label}; not the answer, whatever its speed."
    if worse:
        parts = []
        for n in worse:
            r = by_config[n].to_baseline
            if n == base:
                parts.append(f"{n} (the baseline)")
            elif r is not None:
                parts.append(f"{n} {r.text()}")
            else:
                parts.append(n)
        relative = "" if all(n == base for n in worse) else f" ({words} relative to {base})"
        details.append(f"Clearly worse{relative}: {_join(parts, worse)}.")
    if lacking and ga is not None and leader is not None:
        details.append("Not enough data: " + "; ".join(f"{n} ({ga.standing(n).reason})" for n in lacking) + ".")
    for name, (group_label, v) in unsafe.items():
        if name not in answered:
            details.append(f"UNSAFE: {name}: {_unsafe_reason(v)} in {group_label}; not an answer, whatever its speed.")
    details.append(_baseline_sentence(base, rule))
    regime_text = _regime_sentence(reg)
    if regime_text:
        details.append(regime_text)
    why = None
    if leader is not None and metric is not None and len(members) > 1:
        pair: tuple[str, str] | None = None
        if verdict == "fastest":
            if leader != base and by_config[base].status != "not enough data":
                pair = (leader, base)
            elif worse:
                pair = (leader, _furthest(worse, by_config))
        elif verdict == "tie" and worse:
            pair = (base if base in tied else tied[0], _furthest(worse, by_config))
        if pair:
            why = _why(by_name[pair[0]], by_name[pair[1]], names, metric)
            why_text = _why_sentence(why)
            if why_text:
                details.append(why_text)
    still: tuple[Open, ...] = ()
    if ga is not None and ga.tied:
        pairs = power.still_open(ga, values, delta=delta, draws=draws, seed=seed)
        order = list(by_config)
        opened = []
        for p in pairs:
            a, b = sorted((p.config, p.best), key=order.index)
            opened.append(
                Open(
                    (a, b),
                    p.sigma,
                    p.equivalence.equivalent,
                    p.p_holm,
                    p.repeats_needed,
                    (by_config[a].runs, by_config[b].runs),
                    _open_advice(p, by_config[a].runs, by_config[b].runs),
                )
            )
        still = tuple(opened)
        if still:
            details.append(
                "Still open: "
                + "; ".join(f"{o.configurations[0]} vs {o.configurations[1]}: {o.advice}" for o in still)
                + "."
            )
    return GroupResult(
        key=key,
        label=label,
        workload=kind,
        crash_mode=None,
        metric=metric,
        metric_words=words,
        direction=direction,
        baseline=base,
        baseline_cell=base_cell.id,
        baseline_rule=rule,
        verdict=verdict,
        fastest=fastest,
        leader=leader,
        tied=tied,
        worse=tuple(worse),
        not_enough_data=tuple(lacking),
        configurations=tuple(configs),
        regime=reg,
        why=why,
        crash=(),
        still_open=still,
        headline=headline,
        details=tuple(details),
    )


def _furthest(names: Sequence[str], by_config: Mapping[str, Configuration]) -> str:
    """The one furthest from the baseline (by |ln ratio|); the first when none has a ratio."""

    def distance(n: str) -> float:
        r = by_config[n].to_baseline
        return abs(math.log(r.value)) if r is not None and r.value > 0 else -1.0

    return max(names, key=distance)


def _open_advice(p: power.OpenPair, runs_a: int, runs_b: int) -> str:
    now = f"{runs_a} each now" if runs_a == runs_b else f"{runs_a} and {runs_b} now"
    if p.equivalence.equivalent:
        return f"equivalent within ±{_pct(p.equivalence.delta)} (TOST, Holm p = {p.p_holm:.2g})"
    sigma = f"σ of the logs {_pct(p.sigma, 2)}"
    if p.repeats_needed is None:
        return (
            f"more than {power.N_MAX} runs per configuration would be needed to detect "
            f"{_pct(p.equivalence.delta)} with {_pct(power.TARGET_POWER)} power ({sigma}; {now})"
        )
    return (
        f"{p.repeats_needed} runs per configuration would detect {_pct(p.equivalence.delta)} with "
        f"{_pct(power.TARGET_POWER)} power ({sigma}; {now})"
    )
