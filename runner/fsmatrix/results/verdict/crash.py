"""Crash verdicts (a group with a crash block): per configuration, from its runs' crash sections.

Recovered or not, lost commits, recovery and mount seconds. A run that ended in ``error`` or
``timeout`` without a loss is an infrastructure failure and no verdict on the configuration; a crash
that never fired is none either. A loss of acknowledged commits, or a database that did not come
back, makes the configuration UNSAFE — "by design" when its settings allow it (PostgreSQL
``synchronous_commit: off`` allows a loss, ``fsync: off`` a loss and damage). A configuration that is
unsafe in a crash group is UNSAFE in every speed group where the same settings appear (the same cell
parameters but the workload's and the crash block), whatever its speed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from fsmatrix.results.store import Result
from fsmatrix.results.verdict import stats
from fsmatrix.results.verdict.answer import Configuration, CrashVerdict, GroupResult
from fsmatrix.results.verdict.configurations import _baseline, _baseline_sentence, _Cell, _names, _regime
from fsmatrix.results.verdict.words import _and

INFRASTRUCTURE = ("error", "timeout")  # statuses that are no verdict on a configuration


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


def crash_verdict(name: str, docs: Sequence[Result], flat: Mapping[str, Any]) -> CrashVerdict:
    """One configuration's crash verdict from its runs (see the module's docstring)."""
    runs = [d for d in docs if d.crash is not None and d.status != "skipped"]
    allowed, damage_allowed = _allowed_by(flat)
    recovered = lost_runs = not_recovered = infra = not_crashed = 0
    lost_total: int | None = None
    acked_total: int | None = None
    problems: list[str] = []
    infra_statuses: list[str] = []
    for d in runs:
        section: Mapping[str, Any] = d.crash or {}
        lost, acked = _int(section.get("lost_commits")), _int(section.get("acknowledged"))
        if lost is not None:
            lost_total = (lost_total or 0) + lost
        if acked is not None:
            acked_total = (acked_total or 0) + acked
        status = str(d.status)
        came_back = recovery_status(section)
        reason = (str(d.reason or "").strip().splitlines() or [came_back])[0]
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
    recovery = _seconds([(d.crash or {}).get("recovery_s") for d in runs])
    mount = _seconds([(d.crash or {}).get("mount_s") for d in runs])
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
    kind = str(members[0].docs[0].workload)
    names = _names(members)
    base_cell, rule = _baseline(members, has_matrix, rule_of_matrix)
    sections = [d.crash for c in members for d in c.docs if d.crash is not None]
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
                to_leader=None,
                decided_by="",
                reason=v.verdict,
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
        best=None,
        leader=None,
        equivalent=(),
        not_separated=(),
        worse=(),
        not_enough_data=(),
        configurations=tuple(configs),
        regime=reg,
        why=None,
        crash=verdicts,
        still_open=(),
        race=None,
        headline=headline,
        details=tuple(details),
    )


def recovery_status(section: Mapping[str, Any]) -> str:
    """``yes``, or ``no: <why>``: the crash did not fire, a recovery step failed, or checks failed."""
    if not section.get("fired"):
        return "no: not crashed"
    steps = [s for s in section.get("steps") or [] if isinstance(s, Mapping)]
    failed_steps = [str(s.get("name")) for s in steps if s.get("status") == "failed"]
    if failed_steps:
        return "no: " + ", ".join(failed_steps) + " failed"
    checks = [c for c in section.get("checks") or [] if isinstance(c, Mapping)]
    failed_checks = [str(c.get("name")) for c in checks if c.get("verdict") != "passed"]
    if failed_checks:
        return "no: " + ", ".join(failed_checks) + " failed"
    if not steps and not checks:  # the recover phase never reported (e.g. a timeout)
        return "no: no recovery recorded"
    return "yes"
