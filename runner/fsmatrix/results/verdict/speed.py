"""Speed verdicts (a group without a crash block), on the workload's primary metric in its declared
direction: the best, the equivalent, the not separated, the worse, and why.

``groups.compare_group`` decides (the leader: the best geometric mean; every claim read off the
group's intervals, which hold together at 1 - α) — or, for a group the run raced, the race's
decisions (``raced.py``). Each configuration's ratio to the baseline and to the leader comes with
its interval. Each configuration's regime (the sampler's class of most of its runs); when every
configuration was CPU-bound and the group compares storage, the answer says the disks were not the
bottleneck. The secondary metrics (``SECONDARY``) whose medians differ most between the best and
the baseline (else the worse one furthest behind), by |ln ratio|, at most ``MAX_WHY`` and only
those that differ by ``MIN_WHY_CHANGE`` or more. To settle (``power.still_open``): for each pair not
separated, the runs per configuration that would settle it within ±δ.
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
from fsmatrix.results.verdict.raced import RacedGroup
from fsmatrix.results.verdict.words import _and, _join, _pct, _plain

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


def _ratio(i: groups.Interval | None) -> Ratio | None:
    return None if i is None else Ratio(i.ratio, i.ci_low, i.ci_high, i.confidence, i.family)


def _listed(names: Sequence[str], by_config: Mapping[str, Configuration]) -> str:
    """ "a 1.53× [1.25, 1.75], b 2.10× [...]": each one against the leader."""
    parts = [f"{n} {r.text()}" if (r := by_config[n].to_leader) is not None else n for n in names]
    return _join(parts, names)


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
    raced: RacedGroup | None = None,
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
    ga = groups.compare_group(values, direction, baseline=base, alpha=alpha, delta=delta) if metric else None
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
        status, reason, decided_by = (s.status, s.reason, "intervals") if s else ("not enough data", "no metric", "")
        if raced is not None and c.id in raced.cells:
            r = raced.cells[c.id]
            status, reason, decided_by = r.status, f"after round {r.round}: {r.reason}", "race"
        configs.append(
            Configuration(
                name=name,
                cell=c.id,
                settings=names[c.id][1],
                status=status,
                runs=len(passed),
                failed=sum(1 for d in c.docs if d.status != "skipped") - len(passed),
                median=stats.median(passed) if passed else None,
                to_baseline=_ratio(s.to_baseline) if s else None,
                to_leader=_ratio(s.against_leader) if s and ga and name != ga.leader else None,
                decided_by=decided_by,
                reason=reason,
                regime=reg.by_configuration[name],
                unsafe=name in unsafe,
            )
        )
    by_config = {c.name: c for c in configs}
    of_status = {st: tuple(c.name for c in configs if c.status == st) for st in (*groups.STATUSES,)}
    leader = ga.leader if ga else None
    if raced is not None:
        leader = next((c.name for c in configs if c.status == "best"), None) or next(
            (c.name for c in configs if c.status == "not separated" and c.name == leader), leader
        )
    worse, equivalent, lacking = of_status["worse"], of_status["equivalent"], of_status["not enough data"]
    open_ = of_status["not separated"]
    eligible = [c for c in configs if c.status != "not enough data"]
    details: list[str] = []
    best: str | None = None
    # The pairs not separated and the runs that would settle each: the headline's count and "To settle".
    pairs = power.still_open(ga, values, draws=draws, seed=seed) if ga is not None and open_ and raced is None else ()
    runs = _runs_text([c.runs for c in eligible] or [0])
    than = f" than {leader}" if leader else ""
    if leader is None:
        verdict = "not enough data"
        why_not = "; ".join(f"{c.name}: {c.runs} of {c.runs + c.failed} runs passed" for c in configs)
        headline = (
            f"Not enough data to answer: no configuration has at least {stats.MIN_SAMPLES} passed runs, no "
            f"failed one and no value <= 0 ({why_not})."
        )
    elif len(eligible) == 1:
        verdict = "single"
        only = by_config[leader]
        figures = f"median {words} {_num(only.median or math.nan)}, {only.runs} runs"
        if len(members) == 1:
            headline = f"Only one configuration ({only.name}): nothing to compare; {figures}."
        else:
            headline = f"Only {only.name} has enough data: nothing to compare it with; {figures}."
    elif open_:
        verdict = "not separated"
        headline = f"No single best: {_and(open_)} are not separated on {words}, {runs}{_settle_text(pairs, delta)}."
        others = [n for n in open_ if n != leader]
        if others:
            details.append(f"Not separated from {leader} ({words}, × {leader}'s): {_listed(others, by_config)}.")
    elif not worse:
        verdict = "equivalent"
        headline = f"{_and([c.name for c in eligible])} are equivalent within ±{_pct(delta)} on {words}, {runs}."
        listed = _listed([n for n in equivalent if n != leader], by_config)
        details.append(f"Equivalent within ±{_pct(delta)} to {leader} ({words}, × {leader}'s): {listed}.")
    else:
        verdict = "best"
        best = leader
        lead = by_config[leader]
        if leader == base or lead.to_baseline is None:
            headline = f"{leader}{' (the baseline)' if leader == base else ''} is best on {words}, {runs}."
        else:
            headline = f"{leader} is best: {_ratio_phrase(lead.to_baseline, base, words, direction)}, {runs}."
        if equivalent:
            listed = _listed(equivalent, by_config)
            details.append(f"Equivalent within ±{_pct(delta)} to {leader} ({words}, × {leader}'s): {listed}.")
    answered = (
        (best,) if best else open_ if open_ else tuple(c.name for c in eligible) if verdict == "equivalent" else ()
    )
    for name in (n for n in answered if n in unsafe):
        group_label, v = unsafe[name]
        headline += f" But {name} is UNSAFE: {_unsafe_reason(v)} in {group_label}; not the answer, whatever its speed."
    if worse and leader is not None:
        details.append(f"Worse{than} ({words}, × {leader}'s): {_listed(worse, by_config)}.")
    if raced is not None:
        details.append(raced.rule)
        for conf in configs:
            if conf.decided_by == "race" and conf.status in ("worse", "equivalent"):
                details.append(f"{conf.name}: {conf.status} {conf.reason}.")
    if lacking and leader is not None:
        details.append("Not enough data: " + "; ".join(f"{n} ({by_config[n].reason})" for n in lacking) + ".")
    for name, (group_label, v) in unsafe.items():
        if name not in answered:
            details.append(f"UNSAFE: {name}: {_unsafe_reason(v)} in {group_label}; not an answer, whatever its speed.")
    details.append(_baseline_sentence(base, rule))
    regime_text = _regime_sentence(reg)
    if regime_text:
        details.append(regime_text)
    why = None
    if leader is not None and metric is not None and len(eligible) > 1:
        pair: tuple[str, str] | None = None
        if verdict in ("best", "equivalent"):
            if leader != base and by_config[base].status != "not enough data":
                pair = (leader, base)
            elif worse:
                pair = (leader, _furthest(worse, by_config))
        elif worse:
            pair = (base if base in open_ else open_[0], _furthest(worse, by_config))
        if pair:
            why = _why(by_name[pair[0]], by_name[pair[1]], names, metric)
            why_text = _why_sentence(why)
            if why_text:
                details.append(why_text)
    still: tuple[Open, ...] = ()
    if pairs:
        order = list(by_config)
        opened = []
        for p in pairs:
            a, b = sorted((p.config, p.leader), key=order.index)
            ra, rb = by_config[a].runs, by_config[b].runs
            opened.append(Open((a, b), p.sigma, p.repeats_needed, (ra, rb), _open_advice(p, ra, rb, delta)))
        still = tuple(opened)
        if still:
            details.append(
                "To settle: "
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
        best=best,
        leader=leader,
        equivalent=equivalent,
        not_separated=open_,
        worse=worse,
        not_enough_data=lacking,
        configurations=tuple(configs),
        regime=reg,
        why=why,
        crash=(),
        still_open=still,
        race=raced.rule if raced is not None else None,
        headline=headline,
        details=tuple(details),
    )


def _settle_text(pairs: Sequence[power.OpenPair], delta: float) -> str:
    """ "; 7 runs per configuration would settle ±5 %": the most any open pair needs."""
    needed = [p.repeats_needed for p in pairs]
    if not needed:
        return ""
    if any(n is None for n in needed):
        return f"; more than {power.N_MAX} runs per configuration would be needed to settle ±{_pct(delta)}"
    return f"; {max(n for n in needed if n is not None)} runs per configuration would settle ±{_pct(delta)}"


def _furthest(names: Sequence[str], by_config: Mapping[str, Configuration]) -> str:
    """The one furthest from the baseline (by |ln ratio|); the first when none has a ratio."""

    def distance(n: str) -> float:
        r = by_config[n].to_baseline
        return abs(math.log(r.value)) if r is not None and r.value > 0 else -1.0

    return max(names, key=distance)


def _open_advice(p: power.OpenPair, runs_a: int, runs_b: int, delta: float) -> str:
    now = f"{runs_a} each now" if runs_a == runs_b else f"{runs_a} and {runs_b} now"
    sigma = f"σ of the logs {_pct(p.sigma, 2)}"
    if p.repeats_needed is None:
        return (
            f"more than {power.N_MAX} runs per configuration would be needed to settle ±{_pct(delta)} ({sigma}; {now})"
        )
    return (
        f"{p.repeats_needed} runs per configuration would settle ±{_pct(delta)}: equivalent if equal, separated if "
        f"{_pct(delta)} apart, {_pct(power.TARGET)} of the time each ({sigma}; {now})"
    )
