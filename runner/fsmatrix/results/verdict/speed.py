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
separated, the runs per configuration that would settle it within ±δ. The sentences that say all this
are the renderers' (``render/sentences.py``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from fsmatrix.agent import workloads
from fsmatrix.results.verdict import groups, metrics, outliers, power, stats, work
from fsmatrix.results.verdict.answer import Configuration, CrashVerdict, Factor, Open, Rule, SpeedGroup, Why
from fsmatrix.results.verdict.configurations import Group, Member, fingerprint
from fsmatrix.results.verdict.raced import RacedGroup

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


def _metric(kind: str, cells: Sequence[Member]) -> tuple[str | None, str, str]:
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


def _values(c: Member, metric: str) -> list[float | None]:
    """The metric per run: a failed run (or a passed one without it) is None; skipped runs left out."""
    out: list[float | None] = []
    for d in c.docs:
        if d.status == "skipped":
            continue
        value = metrics.metric_value(d, metric) if d.status == "passed" else None
        out.append(value)
    return out


# configuration fingerprint -> (the crash group's label, the configuration's verdict there)
UnsafeElsewhere = Mapping[tuple[tuple[str, str], ...], tuple[str, CrashVerdict]]


def speed_group(
    group: Group, rule: Rule, unsafe_elsewhere: UnsafeElsewhere, raced: RacedGroup | None = None
) -> SpeedGroup:
    """The group's answer on its primary metric (see the module's docstring)."""
    metric, words, direction = _metric(group.workload, group.cells)
    values = {group.name(c): _values(c, metric) for c in group.cells} if metric else {}
    decided = (
        groups.compare_group(values, direction, baseline=group.baseline_name, alpha=rule.alpha, delta=rule.delta)
        if metric
        else None
    )
    unsafe = {
        group.name(c): unsafe_elsewhere[fingerprint(c.flat)]
        for c in group.cells
        if fingerprint(c.flat) in unsafe_elsewhere
    }
    configs = tuple(_configuration(group, c, metric, decided, raced, unsafe) for c in group.cells)
    leader = decided.leader if decided else None
    if raced is not None:
        leader = next((c.name for c in configs if c.status == "best"), None) or next(
            (c.name for c in configs if c.status == "not separated" and c.name == leader), leader
        )
    of_status = {st: tuple(c.name for c in configs if c.status == st) for st in groups.STATUSES}
    open_ = of_status["not separated"]
    verdict = _verdict(leader, configs, open_, of_status["worse"])
    # The pairs not separated and the runs that would settle each.
    pairs = (
        power.still_open(decided, values, draws=rule.draws, seed=rule.seed)
        if decided is not None and open_ and (raced is None or not raced.decided)
        else ()
    )
    by_config = {c.name: c for c in configs}
    still = _still_open(pairs, by_config)
    g = SpeedGroup(
        group=group,
        metric=metric,
        metric_words=words,
        direction=direction,
        verdict=verdict,
        best=leader if verdict == "best" else None,
        leader=leader,
        equivalent=of_status["equivalent"],
        not_separated=open_,
        worse=of_status["worse"],
        not_enough_data=of_status["not enough data"],
        configurations=configs,
        why=None,
        still_open=still,
        settle_s=_settle_seconds(group, still, by_config),
        raced=raced,
        work=(
            work.work(
                group,
                [c.name for c in configs if c.status != "not enough data"],
                alpha=rule.alpha,
                delta=rule.delta if rule.work_delta is None else rule.work_delta,
            )
            if verdict in ("not separated", "equivalent")
            else None
        ),
        outliers=tuple(o for c in group.cells if metric for o in _outliers(group.name(c), c, metric)),
        unsafe=unsafe,
        rule="race" if raced is not None else decided.rule if decided is not None else "pairs",
        unflushed=work.unflushed(group, [c.name for c in configs]),
    )
    return _with_why(g)


def _outliers(name: str, c: Member, metric: str) -> tuple[outliers.Outlier, ...]:
    passed = [(d, v) for d in c.docs if d.status == "passed" and (v := metrics.metric_value(d, metric)) is not None]
    return outliers.outliers(name, [(d.repeat, v) for d, v in passed], [d.run_id for d, _ in passed])


def _settle_seconds(group: Group, still: Sequence[Open], by_config: Mapping[str, Configuration]) -> float | None:
    """The run time of the runs that would settle every open pair: each configuration in one brought to
    the most runs any pair needs, at the median duration of the group's passed runs (None: unknown)."""
    needed = [o.repeats_needed for o in still]
    durations = [float(d.duration_s) for c in group.cells for d in c.docs if d.status == "passed" and d.duration_s]
    if not needed or any(n is None for n in needed) or not durations:
        return None
    target = max(n for n in needed if n is not None)
    names = {n for o in still for n in o.configurations}
    return sum(max(0, target - by_config[n].runs) for n in names) * stats.median(durations)


def _configuration(
    group: Group,
    c: Member,
    metric: str | None,
    decided: groups.IntervalDecision | None,
    raced: RacedGroup | None,
    unsafe: Collection[str],
) -> Configuration:
    name = group.name(c)
    s = decided.standing(name) if decided else None
    passed = metrics.metric_values(list(c.docs), metric) if metric else []
    status, reason, decided_by = (s.status, s.reason, "intervals") if s else ("not enough data", "no metric", "")
    if raced is not None and c.id in raced.cells:
        r = raced.cells[c.id]
        status, reason, decided_by = r.status, f"after round {r.round}: {r.reason}", "race"
    return Configuration(
        name=name,
        cell=c.id,
        settings=group.settings[c.id],
        status=status,
        runs=len(passed),
        failed=sum(1 for d in c.docs if d.status != "skipped") - len(passed),
        median=stats.median(passed) if passed else None,
        to_baseline=s.to_baseline if s else None,
        to_leader=s.against_leader if s and decided and name != decided.leader else None,
        decided_by=decided_by,
        reason=reason,
        regime=group.regime.by_configuration[name],
        unsafe=name in unsafe,  # a crash group found these settings unsafe
    )


def _verdict(leader: str | None, configs: Sequence[Configuration], open_: Sequence[str], worse: Sequence[str]) -> str:
    eligible = [c for c in configs if c.status != "not enough data"]
    if leader is None:
        return "not enough data"
    if len(eligible) == 1:
        return "single"
    if open_:
        return "not separated"
    return "equivalent" if not worse else "best"


def _still_open(pairs: Sequence[power.OpenPair], by_config: Mapping[str, Configuration]) -> tuple[Open, ...]:
    """Each pair not separated, in the group's order, with the runs each has now."""
    order = list(by_config)
    opened = []
    for p in pairs:
        a, b = sorted((p.config, p.leader), key=order.index)
        opened.append(Open((a, b), p.sigma, p.repeats_needed, (by_config[a].runs, by_config[b].runs)))
    return tuple(opened)


def _with_why(g: SpeedGroup) -> SpeedGroup:
    """``g`` with, where two configurations are set apart, why: the best against the baseline (else the
    worse one furthest from it)."""
    eligible = [c for c in g.configurations if c.status != "not enough data"]
    if g.leader is None or g.metric is None or len(eligible) < 2:
        return g
    by_config = {c.name: c for c in g.configurations}
    base = g.group.baseline_name
    pair: tuple[str, str] | None = None
    if g.verdict in ("best", "equivalent"):
        if g.leader != base and by_config[base].status != "not enough data":
            pair = (g.leader, base)
        elif g.worse:
            pair = (g.leader, _furthest(g.worse, by_config))
    elif g.worse:
        pair = (base if base in g.not_separated else g.not_separated[0], _furthest(g.worse, by_config))
    if pair is None:
        return g
    cell = {g.group.name(c): c for c in g.group.cells}
    return replace(g, why=_why(g.group, cell[pair[0]], cell[pair[1]], g.metric))


def _why(group: Group, best: Member, against: Member, primary: str) -> Why:
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
    return Why(group.name(best), group.name(against), measured, tuple(factors[:MAX_WHY]))


def _furthest(names: Sequence[str], by_config: Mapping[str, Configuration]) -> str:
    """The one furthest from the baseline (by |ln ratio|); the first when none has a ratio."""

    def distance(n: str) -> float:
        r = by_config[n].to_baseline
        return abs(math.log(r.ratio)) if r is not None and r.ratio > 0 else -1.0

    return max(names, key=distance)
