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
from typing import Any

from fsmatrix.results.store import Result
from fsmatrix.results.verdict import stats
from fsmatrix.results.verdict.answer import Configuration, CrashGroup, CrashVerdict
from fsmatrix.results.verdict.configurations import Group

INFRASTRUCTURE = ("error", "timeout")  # statuses that are no verdict on a configuration
UNSAFE = ("unsafe", "unsafe by design")  # the crash verdicts that make a configuration UNSAFE


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
    never: list[str] = []
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
            if status != "passed" and d.reason and reason not in never:  # why it never crashed
                never.append(reason)
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
    return CrashVerdict(
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
        infrastructure_statuses=tuple(sorted(set(infra_statuses))),
        damage_allowed=damage_allowed,
        not_crashed_why=tuple(never),
    )


def crash_group(group: Group) -> CrashGroup:
    """Each configuration's crash verdict (see the module's docstring)."""
    sections = [d.crash for c in group.cells for d in c.docs if d.crash is not None]
    mode = str(group.cells[0].flat.get("crash.mode") or sections[0].get("mode") or "crash")
    verdicts = tuple(crash_verdict(group.name(c), c.docs, c.flat) for c in group.cells)
    configs = [
        Configuration(
            name=group.name(c),
            cell=c.id,
            settings=group.settings[c.id],
            status="crash",
            runs=v.runs,
            failed=v.runs - v.recovered,
            median=v.recovery_s,
            to_baseline=None,
            to_leader=None,
            decided_by="",
            reason=v.verdict,
            regime=group.regime.by_configuration[group.name(c)],
            unsafe=v.verdict in UNSAFE,
        )
        for c, v in zip(group.cells, verdicts, strict=True)
    ]
    return CrashGroup(group=group, configurations=tuple(configs), mode=mode, crash=verdicts)


def recovery_status(section: Mapping[str, Any]) -> str:
    """``yes``, or ``no: <why>``: the crash did not fire, a recovery step failed, or checks failed."""
    if not section.get("fired"):
        return "no: not crashed"
    points = [p for p in section.get("points") or [] if isinstance(p, Mapping)]
    if points:  # crash.mode flush-points: one recovery per point, each with its own steps and checks
        failed = sum(1 for p in points if p.get("verdict") != "passed")
        return f"no: {failed} of {len(points)} flush points failed" if failed else "yes"
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
