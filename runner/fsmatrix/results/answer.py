"""The answer: what the runs decided, per comparison group, in sentences a reader can act on.

Pure: result documents (and, when there is one, the run's ``matrix.json`` as a dict) in, an
``Answer`` out; ``markdown_lines``, ``summary_lines`` and ``to_json`` render it (htmlreport.py draws
its HTML and forest plots). How it is computed, for people: docs/answer.md; the JSON's schema:
docs/answer.schema.json.

- **Groups.** A comparison group is ``matrix.comparison_group``: the same workload with the same
  parameters and the same crash block. A *configuration* is one cell of the group, named by the
  settings that vary inside the group ("xfs", "ext4 data=writeback", "btrfs, gtm.journal=nobefore").
  When the runs come from several hardware classes (``hardware.py``: a fleet's mixed machines), each
  group is split by class and its label ends "on <class>": numbers from unlike machines are never
  ranked together.
- **Baseline.** The cell ``matrix.json`` marks ``"baseline": true`` (its ``baseline_rule`` says
  whether the matrix named it or it is the cell with every setting at its default); without one,
  the group's first cell in ``matrix.json``'s order; without ``matrix.json``, the first by cell id.
  Every answer says which rule chose it.
- **Best, tied, worse** (a group without a crash block), on the workload's primary metric in its
  declared direction: ``decide.compare_group`` (the best median; each other configuration compared
  with it, Holm-adjusted; tied = not "slower" after the correction) and each configuration's ratio
  to the baseline with its 95 % bootstrap interval. A best with no tie is *fastest*; a best with
  ties is not: the tied ones are named together, in the group's order, never ranked.
- **Regime and why.** Each configuration's regime (``results.regime``: the sampler's class of most
  of its runs); when every configuration was CPU-bound and the group compares storage, the answer
  says the disks were not the bottleneck. The secondary metrics (``SECONDARY``) whose medians differ
  most between the best and the baseline (else the clearly worse one furthest behind), by
  |ln ratio|, at most ``MAX_WHY`` and only those that differ by ``MIN_WHY_CHANGE`` or more.
- **Crash verdicts** (a group with a crash block): per configuration, from its runs' crash sections:
  recovered or not, lost commits, recovery and mount seconds. A run that ended in ``error`` or
  ``timeout`` without a loss is an infrastructure failure and no verdict on the configuration; a
  crash that never fired is none either. A loss of acknowledged commits, or a database that did not
  come back, makes the configuration UNSAFE — "by design" when its settings allow it (PostgreSQL
  ``synchronous_commit: off`` allows a loss, ``fsync: off`` a loss and damage). A configuration
  that is unsafe in a crash group is UNSAFE in every speed group where the same settings appear
  (the same cell parameters but the workload's and the crash block), whatever its speed.
- **Still open** (``decide.still_open``): each tied pair is "equivalent within ±δ" (TOST, Holm
  across the group's tied pairs) or gets n*, the runs per configuration that would detect δ with
  80 % power.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fsmatrix import matrix
from fsmatrix.agent import jsonfile, workloads
from fsmatrix.agent.cell import Cell
from fsmatrix.matrix import flatten
from fsmatrix.results import compare, crashtable, decide, hardware, regime, stats

DELTA = decide.DELTA
MAX_WHY = 3  # secondary metrics named as the reason, at most
MIN_WHY_CHANGE = 0.05  # a secondary metric whose medians differ by less than 5 % is no reason
SUMMARY_LINES = 8  # the run's progress output: this many lines of the answer at most
INFRASTRUCTURE = ("error", "timeout")  # statuses that are no verdict on a configuration

# Where a baseline came from: matrix.json's ``baseline_rule`` ("named", "defaults"), or the fallbacks.
RULES = {
    "named": "named in the matrix",
    "defaults": "every setting at its default",
    "recorded": "marked in matrix.json",
    "first-cell": "first cell; the matrix names none",
    "absent": "first cell; the matrix's baseline has no results here",
    "first-id": "first by cell id; no matrix.json",
}
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
STORAGE_KEYS = ("filesystem", "mount_options", "mkfs_options")
STORAGE_PREFIXES = ("storage.", "device.")
CRASH_VERDICTS = ("safe", "unsafe", "unsafe by design", "no verdict")
VERDICTS = ("fastest", "tie", "single", "not enough data", "crash")


# ----------------------------------------------------------------------------------- the types


@dataclass(frozen=True)
class Ratio:
    """median(configuration) / median(baseline), with its bootstrap interval."""

    value: float
    ci_low: float
    ci_high: float
    confidence: float

    def text(self) -> str:
        return f"{self.value:.2f}× [{self.ci_low:.2f}, {self.ci_high:.2f}]"


@dataclass(frozen=True)
class Configuration:
    """One cell of a group, as the answer names and places it."""

    name: str  # the settings that vary inside the group
    cell: str  # its cell id
    settings: dict[str, str]  # those settings, dotted key -> value as text
    status: str  # decide.STATUSES, or "crash" in a crash group
    runs: int  # passed runs with a value of the metric (a crash group: runs with a crash section)
    failed: int  # runs that did not pass (or passed without the metric)
    median: float | None
    to_baseline: Ratio | None
    p_holm: float | None  # against the best, Holm-adjusted; None for the best and without enough data
    test: str | None  # the test that compared it with the best
    regime: str  # "cpu", "io", "mixed" or "" (no samples)
    unsafe: bool  # lost committed data or did not recover after a crash (here or in a crash group)


@dataclass(frozen=True)
class Factor:
    """A secondary metric: its median for ``Why.best`` over its median for ``Why.against``."""

    metric: str
    words: str
    ratio: float
    best_median: float
    against_median: float
    significant: bool  # the test ``compare`` uses separates the two


@dataclass(frozen=True)
class Why:
    best: str
    against: str
    measured: int  # the secondary metrics both sides have (SECONDARY, but the primary)
    factors: tuple[Factor, ...]  # the ones that differ most, by MIN_WHY_CHANGE or more


@dataclass(frozen=True)
class Regime:
    overall: str  # "cpu", "io", "mixed" (each configuration the same), "varies", or "" (no samples)
    by_configuration: dict[str, str]
    storage_comparison: bool  # the group's configurations differ in the storage stack
    disks_not_bottleneck: bool  # a storage comparison in which every configuration was CPU-bound


@dataclass(frozen=True)
class CrashVerdict:
    """What the crash runs of one configuration showed."""

    configuration: str
    verdict: str  # one of CRASH_VERDICTS
    runs: int  # runs with a crash section (skipped ones left out)
    recovered: int  # came back with every check passed
    lost_runs: int  # runs that lost acknowledged commits
    lost_commits: int | None  # summed over the runs that counted them
    acknowledged: int | None
    not_recovered: int  # runs where the database did not come back or a check failed (without a loss)
    infrastructure: int  # runs that ended in error or timeout without a loss: no verdict
    not_crashed: int  # runs whose crash never fired: no verdict
    recovery_s: float | None  # median over the runs that measured it
    mount_s: float | None
    allowed_by: tuple[str, ...]  # the settings that allow a loss ("synchronous_commit=off", "fsync=off")
    problems: tuple[str, ...]  # what went wrong, first line of each distinct reason
    text: str


@dataclass(frozen=True)
class Open:
    """A pair the statistics could not separate: equivalent within ±δ, or the runs that would settle it."""

    configurations: tuple[str, str]  # in the group's order
    sigma: float  # pooled standard deviation of the pair's logs
    equivalent: bool
    tost_p: float  # Holm-adjusted across the group's tied pairs
    repeats_needed: int | None  # n*; None when equivalent or more than decide.N_MAX
    runs: tuple[int, int]
    advice: str


@dataclass(frozen=True)
class GroupResult:
    key: str  # matrix.comparison_group's key
    label: str
    workload: str
    crash_mode: str | None
    metric: str | None  # the primary metric (None: a crash group)
    metric_words: str
    direction: str | None
    baseline: str | None  # a configuration's name
    baseline_cell: str | None
    baseline_rule: str  # a key of RULES
    verdict: str  # one of VERDICTS
    fastest: str | None  # only when one configuration is better than every other
    leader: str | None  # the best median among those with enough data (with ties: not a ranking)
    tied: tuple[str, ...]  # with ties: the leader and every one tied with it, in the group's order
    worse: tuple[str, ...]
    not_enough_data: tuple[str, ...]
    configurations: tuple[Configuration, ...]
    regime: Regime
    why: Why | None
    crash: tuple[CrashVerdict, ...]
    still_open: tuple[Open, ...]
    headline: str
    details: tuple[str, ...]  # the other sentences, in the order the reports print them

    @property
    def sentences(self) -> tuple[str, ...]:
        return (self.headline, *self.details)

    def configuration(self, name: str) -> Configuration:
        for c in self.configurations:
            if c.name == name:
                return c
        raise KeyError(name)


@dataclass(frozen=True)
class Answer:
    alpha: float
    delta: float
    confidence: float
    groups: tuple[GroupResult, ...] = field(default_factory=tuple)

    @property
    def unsafe(self) -> tuple[tuple[str, str], ...]:
        """(group label, configuration) of every configuration the answer calls UNSAFE."""
        return tuple((g.label, c.name) for g in self.groups for c in g.configurations if c.unsafe)

    def group(self, label: str) -> GroupResult:
        for g in self.groups:
            if g.label == label:
                return g
        raise KeyError(label)


# ----------------------------------------------------------------------------------- building


@dataclass
class _Cell:
    id: str
    docs: list[dict[str, Any]]
    flat: dict[str, Any]
    group_key: str
    group_label: str
    baseline_flag: bool | None


def _group_of(params: Mapping[str, Any], workload: str) -> tuple[str, str]:
    """matrix.comparison_group's key and label; for parameters this fsmatrix cannot parse (an old
    result), the same key built from the stored JSON and the workload's name as the label."""
    try:
        group = matrix.comparison_group(Cell.from_dict(params))
    except (ValueError, TypeError, KeyError, AttributeError):
        label = workload + (f" (crash: {params['crash'].get('mode')})" if isinstance(params.get("crash"), dict) else "")
        return matrix.group_key(params), label
    return group.key, group.label


def _repeat(doc: Mapping[str, Any]) -> int:
    value = doc.get("repeat")
    return value if isinstance(value, int) else 0


def _cells(docs: Sequence[dict[str, Any]], matrix_json: Mapping[str, Any] | None) -> list[_Cell]:
    """The cells the documents hold, in matrix.json's order (then by id), with their groups (as
    matrix.json records them, ``group`` and ``group_label``, else ``matrix.comparison_group``'s)."""
    by_cell: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for doc in docs:
        by_cell[str(doc["cell_id"])].append(doc)
    entries: dict[str, Mapping[str, Any]] = {}
    for entry in (matrix_json or {}).get("cells") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("id"), str):
            entries.setdefault(entry["id"], entry)
    order = [cid for cid in entries if cid in by_cell] + sorted(cid for cid in by_cell if cid not in entries)
    # Runs from several hardware classes: each class's runs are compared among themselves only.
    by_class = hardware.split({cid: by_cell[cid] for cid in order})
    cells = []
    for cid, klass in ((cid, k) for k, members in by_class.items() for cid in order if cid in members):
        ds = sorted(by_class[klass][cid], key=_repeat)
        params = ds[0].get("params") or {}
        key, label = _group_of(params, str(ds[0].get("workload")))
        section = next((d["crash"] for d in ds if isinstance(d.get("crash"), Mapping)), None)
        if section is not None and "crash" not in params:  # a crash result whose params do not say so
            key += f"|crash:{section.get('mode')}"
            label += f" (crash: {section.get('mode')})"
        entry = entries.get(cid, {})
        if isinstance(entry.get("group"), str) and entry["group"]:  # as the matrix grouped it
            key = entry["group"]
        if isinstance(entry.get("group_label"), str) and entry["group_label"]:
            label = entry["group_label"]
        if len(by_class) > 1:
            key += f"|hardware:{klass}"
            label += f" on {klass}"
        flag = entry.get("baseline")
        cells.append(_Cell(cid, ds, flatten(params), key, label, flag if isinstance(flag, bool) else None))
    return cells


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _names(cells: Sequence[_Cell]) -> dict[str, tuple[str, dict[str, str]]]:
    """cell id -> (configuration name, the varying settings) for the cells of one group."""
    keys = list(dict.fromkeys(k for c in cells for k in c.flat))
    varying = [k for k in keys if len({_show(c.flat.get(k, "–")) for c in cells}) > 1]
    out = {}
    for c in cells:
        settings = {k: _show(c.flat.get(k, "–")) for k in varying}
        head = ""
        if any(k in varying for k in STORAGE_KEYS) or not varying:
            head = str(c.flat.get("filesystem", c.id))
            if c.flat.get("mount_options"):
                head += f" {c.flat['mount_options']}"
            if "mkfs_options" in varying and c.flat.get("mkfs_options"):
                head += f" (mkfs {c.flat['mkfs_options']})"
        rest = [f"{k}={settings[k]}" for k in varying if k not in STORAGE_KEYS]
        out[c.id] = (", ".join(([head] if head else []) + rest), settings)
    names = [n for n, _ in out.values()]
    return {
        cid: (f"{name} ({cid})" if names.count(name) > 1 else name, settings) for cid, (name, settings) in out.items()
    }


def _metric(kind: str, cells: Sequence[_Cell]) -> tuple[str | None, str, str]:
    """The workload's primary metric, its words and its direction (the first key metric of an
    unregistered workload)."""
    if kind in workloads.WORKLOADS:
        m = workloads.get(kind).primary_metric
        title = m.title.split(" (")[0]
        return m.name, SHORT_METRIC.get(m.name, title[:1].lower() + title[1:]), m.better
    for c in cells:
        for d in c.docs:
            for name, direction in (d.get("key_metrics") or {}).items():
                return str(name), str(name), str(direction)
    return None, "", "lower"


def _values(c: _Cell, metric: str) -> list[float | None]:
    """The metric per run: a failed run (or a passed one without it) is None; skipped runs left out."""
    out: list[float | None] = []
    for d in c.docs:
        if d.get("status") == "skipped":
            continue
        value = compare.metric_value(d, metric) if d.get("status") == "passed" else None
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


def build(
    docs: Sequence[dict[str, Any]],
    matrix_json: Mapping[str, Any] | None = None,
    *,
    delta: float = DELTA,
    alpha: float = stats.ALPHA,
    draws: int = decide.DRAWS,
    seed: int = 0,
) -> Answer:
    """The answer for these result documents (see the module's docstring). ``matrix_json``: the
    run's ``matrix.json`` (baselines, cell order); ``delta``: the minimum effect of the repeat advice
    and of the equivalence test; ``draws``: the repeat advice's simulated draws per n."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), not {delta}")
    cells = _cells(compare.with_environment_axes(list(docs)), matrix_json)  # an image axis names every image
    grouped: dict[str, list[_Cell]] = {}
    for c in cells:
        grouped.setdefault(c.group_key, []).append(c)
    has_matrix = matrix_json is not None
    rule_of_matrix = (matrix_json or {}).get("baseline_rule")
    # Crash groups first: their verdicts mark configurations unsafe in the speed groups too.
    crash_results: dict[str, GroupResult] = {}
    unsafe_elsewhere: dict[tuple[tuple[str, str], ...], tuple[str, CrashVerdict]] = {}
    for key, members in grouped.items():
        if any(isinstance(d.get("crash"), Mapping) for c in members for d in c.docs):
            result = crash_results[key] = _crash_group(key, members, has_matrix, rule_of_matrix)
            for c, v in zip(members, result.crash, strict=True):
                if v.verdict in ("unsafe", "unsafe by design"):
                    unsafe_elsewhere[_fingerprint(c.flat)] = (result.label, v)
    groups = []
    for key, members in grouped.items():
        if key in crash_results:
            groups.append(crash_results[key])
        else:
            groups.append(
                _speed_group(
                    key, members, has_matrix, rule_of_matrix, unsafe_elsewhere, delta=delta, alpha=alpha,
                    draws=draws, seed=seed,
                )
            )  # fmt: skip
    return Answer(alpha=alpha, delta=delta, confidence=1 - alpha, groups=tuple(groups))


def _fingerprint(flat: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A configuration's settings without the workload's parameters, the crash block and the timeout:
    what a speed cell and a crash cell of the same stack share."""
    keep = (k for k in flat if not k.startswith(("workload.", "crash.")) and k != "timeout")
    return tuple(sorted((k, _show(flat[k])) for k in keep))


def _baseline(members: Sequence[_Cell], has_matrix: bool, rule_of_matrix: Any) -> tuple[_Cell, str]:
    flagged = [c for c in members if c.baseline_flag]
    if len(flagged) == 1:
        rule = rule_of_matrix if rule_of_matrix in ("named", "defaults") else "recorded"
        return flagged[0], rule
    if has_matrix:
        # The matrix chose one, but not among these cells (a run of some of its cells only).
        absent = not flagged and rule_of_matrix in ("named", "defaults")
        return members[0], "absent" if absent else "first-cell"
    return min(members, key=lambda c: c.id), "first-id"


def _baseline_sentence(name: str, rule: str) -> str:
    verb = "Baseline" if rule == "named" else "Baseline chosen"
    return f"{verb}: {name} ({RULES[rule]})."


def _storage_comparison(settings: Mapping[str, str]) -> bool:
    return any(k in STORAGE_KEYS or k.startswith(STORAGE_PREFIXES) for k in settings)


def _regime(members: Sequence[_Cell], names: Mapping[str, tuple[str, dict[str, str]]]) -> Regime:
    by_config = {names[c.id][0]: regime(c.docs) for c in members}
    known = {r for r in by_config.values() if r}
    overall = "" if not known else known.pop() if len(known) == 1 and all(by_config.values()) else "varies"
    storage = any(_storage_comparison(settings) for _, settings in names.values())
    return Regime(overall, by_config, storage, storage and overall == "cpu" and len(members) > 1)


def _regime_sentence(r: Regime) -> str | None:
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
        parts = _join([f"{n} {words.get(reg, reg)}" for n, reg in r.by_configuration.items()], list(r.by_configuration))
        return f"Regime: {parts}."
    return None


def _why(best: _Cell, against: _Cell, names: Mapping[str, tuple[str, dict[str, str]]], primary: str) -> Why:
    factors = []
    measured = 0
    for metric, words in SECONDARY.items():
        if metric == primary:
            continue
        a, b = compare.metric_values(best.docs, metric), compare.metric_values(against.docs, metric)
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
    kind = str(members[0].docs[0].get("workload"))
    label = members[0].group_label
    names = _names(members)
    name_of = {c.id: names[c.id][0] for c in members}
    by_name = {name_of[c.id]: c for c in members}
    metric, words, direction = _metric(kind, members)
    base_cell, rule = _baseline(members, has_matrix, rule_of_matrix)
    base = name_of[base_cell.id]
    reg = _regime(members, names)
    values = {name_of[c.id]: _values(c, metric) for c in members} if metric else {}
    ga = decide.compare_group(values, direction, baseline=base, alpha=alpha, seed=seed) if metric else None
    unsafe = {
        name_of[c.id]: unsafe_elsewhere[_fingerprint(c.flat)]
        for c in members
        if _fingerprint(c.flat) in unsafe_elsewhere
    }
    configs = []
    for c in members:
        name = name_of[c.id]
        s = ga.standing(name) if ga else None
        passed = compare.metric_values(c.docs, metric) if metric else []
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
                failed=sum(1 for d in c.docs if d.get("status") != "skipped") - len(passed),
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
        pairs = decide.still_open(ga, values, delta=delta, draws=draws, seed=seed)
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


def _open_advice(p: decide.OpenPair, runs_a: int, runs_b: int) -> str:
    now = f"{runs_a} each now" if runs_a == runs_b else f"{runs_a} and {runs_b} now"
    if p.equivalence.equivalent:
        return f"equivalent within ±{_pct(p.equivalence.delta)} (TOST, Holm p = {p.p_holm:.2g})"
    sigma = f"σ of the logs {_pct(p.sigma, 2)}"
    if p.repeats_needed is None:
        return (
            f"more than {decide.N_MAX} runs per configuration would be needed to detect "
            f"{_pct(p.equivalence.delta)} with {_pct(decide.TARGET_POWER)} power ({sigma}; {now})"
        )
    return (
        f"{p.repeats_needed} runs per configuration would detect {_pct(p.equivalence.delta)} with "
        f"{_pct(decide.TARGET_POWER)} power ({sigma}; {now})"
    )


def _pct(fraction: float, digits: int = 3) -> str:
    """0.05 -> "5 %", 0.025 -> "2.5 %" (``digits`` significant digits at most)."""
    return f"{float(f'{fraction * 100:.{digits}g}'):g} %"


def _plain(name: str) -> bool:
    """A name that takes a possessive ("xfs's"): one word."""
    return not any(ch in name for ch in " ,=")


def _join(items: Sequence[str], names: Sequence[str] | None = None) -> str:
    """A list, with semicolons when a name in it has a comma of its own ("btrfs, gtm.journal=off")."""
    return ("; " if any("," in n for n in (items if names is None else names)) else ", ").join(items)


def _and(names: Sequence[str]) -> str:
    if len(names) == 1:
        return names[0]
    return _join(names[:-1]) + ("; and " if any("," in n for n in names) else " and ") + names[-1]


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


# ----------------------------------------------------------------------------------- crash groups


def _allowed_by(flat: Mapping[str, Any]) -> tuple[tuple[str, ...], bool]:
    """The settings that allow losing acknowledged commits, and whether they allow damage too
    (PostgreSQL: synchronous_commit off allows a loss of the last commits; fsync off a loss and a
    damaged cluster)."""
    allowed = []
    if str(flat.get("postgres.synchronous_commit", "on")) == "off":
        allowed.append("synchronous_commit=off")
    fsync = flat.get("postgres.fsync", True)
    fsync_off = fsync is False or str(fsync).lower() in ("off", "false")
    if fsync_off:
        allowed.append("fsync=off")
    return tuple(allowed), fsync_off


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _seconds(values: Sequence[Any]) -> float | None:
    found = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
    return stats.median(found) if found else None


def crash_verdict(name: str, docs: Sequence[dict[str, Any]], flat: Mapping[str, Any]) -> CrashVerdict:
    """One configuration's crash verdict from its runs (see the module's docstring)."""
    runs = [d for d in docs if isinstance(d.get("crash"), Mapping) and d.get("status") != "skipped"]
    allowed, damage_allowed = _allowed_by(flat)
    recovered = lost_runs = not_recovered = infra = not_crashed = 0
    lost_total: int | None = None
    acked_total: int | None = None
    problems: list[str] = []
    infra_statuses: list[str] = []
    for d in runs:
        section: Mapping[str, Any] = d["crash"]
        lost, acked = _int(section.get("lost_commits")), _int(section.get("acknowledged"))
        if lost is not None:
            lost_total = (lost_total or 0) + lost
        if acked is not None:
            acked_total = (acked_total or 0) + acked
        status = str(d.get("status"))
        came_back = crashtable.recovered(section)
        reason = (str(d.get("reason") or "").strip().splitlines() or [came_back])[0]
        if lost:
            lost_runs += 1
        elif status in INFRASTRUCTURE:
            infra += 1
            infra_statuses.append(status)
        elif not section.get("fired"):
            not_crashed += 1
        elif came_back != "yes" or status != "passed":
            not_recovered += 1
            if reason not in problems:
                problems.append(reason)
        else:
            recovered += 1
    by_design_loss = bool(allowed)
    if lost_runs or not_recovered:
        design = (not lost_runs or by_design_loss) and (not not_recovered or damage_allowed)
        verdict = "unsafe by design" if design else "unsafe"
    elif recovered:
        verdict = "safe"
    else:
        verdict = "no verdict"
    recovery = _seconds([d["crash"].get("recovery_s") for d in runs])
    mount = _seconds([d["crash"].get("mount_s") for d in runs])
    v = CrashVerdict(
        configuration=name,
        verdict=verdict,
        runs=len(runs),
        recovered=recovered,
        lost_runs=lost_runs,
        lost_commits=lost_total,
        acknowledged=acked_total,
        not_recovered=not_recovered,
        infrastructure=infra,
        not_crashed=not_crashed,
        recovery_s=recovery,
        mount_s=mount,
        allowed_by=allowed,
        problems=tuple(problems),
        text="",
    )
    return _with_text(v, sorted(set(infra_statuses)), damage_allowed)


def _lost_words(v: CrashVerdict) -> str:
    of = f" of {v.acknowledged:,}" if v.acknowledged is not None else ""
    return f"lost {v.lost_commits or 0:,}{of} acknowledged commits in {v.lost_runs} of {v.runs} runs"


def _unsafe_reason(v: CrashVerdict) -> str:
    parts = []
    if v.lost_runs:
        parts.append(_lost_words(v))
    if v.not_recovered:
        parts.append(f"did not recover in {v.not_recovered} of {v.runs} runs")
    text = " and ".join(parts) + " after a crash"
    if v.verdict == "unsafe by design":
        text += f" (by design: {', '.join(v.allowed_by)} allows it)"
    return text


def _with_text(v: CrashVerdict, infra_statuses: Sequence[str], damage_allowed: bool) -> CrashVerdict:
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
            bits.append(f"{v.infrastructure} ended in an infrastructure failure ({', '.join(infra_statuses)})")
        if v.not_crashed:
            bits.append(f"{v.not_crashed} never crashed")
        aside = f" Not counted: {' and '.join(bits)}: no verdict on the configuration."
    name = v.configuration
    if v.verdict == "safe":
        lost = f", no acknowledged commit lost (0 of {v.acknowledged:,})" if v.acknowledged is not None else ""
        text = f"{name}: recovered in {v.recovered} of {v.runs} runs{lost}{timing}."
    elif v.verdict == "no verdict":
        text = f"{name}: no verdict, no run crashed and recovered.{aside}"
        aside = ""
    else:
        parts = []
        if v.lost_runs:
            parts.append(_lost_words(v))
        if v.not_recovered:
            parts.append(f"did not recover in {v.not_recovered} of {v.runs} runs ({'; '.join(v.problems)})")
        what = " and ".join(parts)
        if v.verdict == "unsafe by design":
            allows = ", ".join(v.allowed_by)
            text = f"{name}: UNSAFE by design: {what}; {allows} allows that"
        else:
            promise = (
                "its settings (synchronous_commit and fsync on) promise to keep every acknowledged commit"
                if v.lost_runs and not v.allowed_by
                else "nothing in its settings allows that"
            )
            if v.not_recovered and not damage_allowed and v.allowed_by:
                promise = f"{', '.join(v.allowed_by)} allows losing the last commits, not a damaged database"
            text = f"{name}: UNSAFE: {what}; {promise}"
        text += f"{timing}."
    return replace(v, text=text + aside)


def _crash_group(key: str, members: list[_Cell], has_matrix: bool, rule_of_matrix: Any) -> GroupResult:
    kind = str(members[0].docs[0].get("workload"))
    names = _names(members)
    base_cell, rule = _baseline(members, has_matrix, rule_of_matrix)
    sections = [d["crash"] for c in members for d in c.docs if isinstance(d.get("crash"), Mapping)]
    mode = str(members[0].flat.get("crash.mode") or sections[0].get("mode") or "crash")
    verdicts = tuple(crash_verdict(names[c.id][0], c.docs, c.flat) for c in members)
    reg = _regime(members, names)
    configs = []
    for c, v in zip(members, verdicts, strict=True):
        configs.append(
            Configuration(
                name=names[c.id][0],
                cell=c.id,
                settings=names[c.id][1],
                status="crash",
                runs=v.runs,
                failed=v.runs - v.recovered,
                median=v.recovery_s,
                to_baseline=None,
                p_holm=None,
                test=None,
                regime=reg.by_configuration[names[c.id][0]],
                unsafe=v.verdict in ("unsafe", "unsafe by design"),
            )
        )
    unsafe = [v for v in verdicts if v.verdict == "unsafe"]
    by_design = [v for v in verdicts if v.verdict == "unsafe by design"]
    safe = [v for v in verdicts if v.verdict == "safe"]
    parts = []
    if unsafe:
        parts.append(
            f"UNSAFE: {_and([v.configuration for v in unsafe])} (a loss or damage its settings promise not to have)"
        )
    if by_design:
        allows = sorted({a for v in by_design for a in v.allowed_by})
        parts.append(f"UNSAFE by design: {_and([v.configuration for v in by_design])} ({', '.join(allows)} allows it)")
    if safe:
        parts.append(f"recovered from every crash: {_and([v.configuration for v in safe])}")
    undecided = [v for v in verdicts if v.verdict == "no verdict"]
    if undecided:
        parts.append(f"no verdict: {_and([v.configuration for v in undecided])}")
    headline = f"Crash verdict ({mode}): " + "; ".join(parts) + "."
    details = [v.text for v in verdicts]
    details.append(_baseline_sentence(names[base_cell.id][0], rule))
    return GroupResult(
        key=key,
        label=members[0].group_label,
        workload=kind,
        crash_mode=mode,
        metric=None,
        metric_words="",
        direction=None,
        baseline=names[base_cell.id][0],
        baseline_cell=base_cell.id,
        baseline_rule=rule,
        verdict="crash",
        fastest=None,
        leader=None,
        tied=(),
        worse=(),
        not_enough_data=(),
        configurations=tuple(configs),
        regime=reg,
        why=None,
        crash=verdicts,
        still_open=(),
        headline=headline,
        details=tuple(details),
    )


# ----------------------------------------------------------------------------------- rendering

INTRO = (
    "Per comparison group (one workload with one input; what differs between its cells is the "
    "configuration), on the workload's primary metric: ratios are to the baseline's median, with a "
    "{confidence} bootstrap interval [low, high]; tied: not told apart from the best by the test "
    "`compare` uses after Holm's correction, never ranked; δ = {delta}: the smallest difference the "
    "repeat advice and the equivalence test look for. How it is computed: docs/answer.md."
)


def intro(answer: Answer) -> str:
    return INTRO.format(confidence=_pct(answer.confidence), delta=_pct(answer.delta))


def _group_heading(g: GroupResult) -> str:
    if g.metric is None:
        return g.label
    return f"{g.label}: {g.metric_words} ({g.direction} is better)"


def _bold_unsafe(text: str) -> str:
    return text.replace("UNSAFE", "**UNSAFE**")


def markdown_lines(answer: Answer) -> list[str]:
    """The report's "The answer" section."""
    lines = ["## The answer", "", intro(answer), ""]
    if not answer.groups:
        return [*lines, "No results to answer from.", ""]
    for g in answer.groups:
        lines += [f"### {_group_heading(g)}", "", f"**{g.headline}**", ""]
        lines += [f"- {_bold_unsafe(s)}" for s in g.details]
        lines.append("")
    return lines


def summary_lines(answer: Answer, limit: int = SUMMARY_LINES) -> list[str]:
    """The answer's first lines, for the end of a run's progress output: each group's headline."""
    lines = [f"answer: {g.label}: {g.headline}" for g in answer.groups]
    if len(lines) > limit:
        lines = [*lines[: limit - 1], f"answer: ... and {len(lines) - limit + 1} more groups: see the report"]
    return lines


def to_json(answer: Answer) -> dict[str, Any]:
    """The answer as JSON (docs/answer.schema.json): non-finite numbers as null."""
    doc = asdict(answer)
    for g, group in zip(doc["groups"], answer.groups, strict=True):
        g["sentences"] = list(group.sentences)
    out: dict[str, Any] = jsonfile.strict(doc)
    return out
