"""The answer rendered: its Markdown section, the run's closing lines, and its JSON
(docs/answer.schema.json)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fsmatrix.agent import jsonfile
from fsmatrix.results.render import effects
from fsmatrix.results.render.phrases import open_advice, race_rule
from fsmatrix.results.render.sentences import crash_text, said
from fsmatrix.results.render.words import pct
from fsmatrix.results.verdict.answer import (
    VERSION,
    Answer,
    Configuration,
    CrashGroup,
    CrashVerdict,
    GroupResult,
    SpeedGroup,
)
from fsmatrix.results.verdict.groups import Interval
from fsmatrix.results.verdict.work import Work

SUMMARY_LINES = 8  # the run's progress output: this many lines of the answer at most


INTRO = (
    "Per comparison group (one workload with one input; what differs between its cells is the "
    "configuration), on the workload's primary metric. Ratios are of geometric means, with Welch's "
    "interval [low, high] on logs; a group's intervals hold together with {confidence} confidence "
    "(each at 1 - α/m, m the group's pairs), and every word is read off them: best: every other "
    "configuration worse or equivalent; equivalent within ±{delta}: the interval inside ±{delta}; not "
    "separated: the interval holds 1 and reaches beyond ±{delta}; worse: the interval wholly on the "
    "worse side of 1. A raced group's words are the race's decisions. How it is computed: docs/answer.md."
)


def intro(answer: Answer) -> str:
    return INTRO.format(confidence=pct(answer.confidence), delta=pct(answer.delta))


def group_heading(g: GroupResult) -> str:
    """A group's heading: its label, and for a speed group the metric and its direction."""
    if isinstance(g, CrashGroup) or g.metric is None:
        return g.label
    return f"{g.label}: {g.metric_words} ({g.direction} is better)"


def _bold_unsafe(text: str) -> str:
    return text.replace("UNSAFE", "**UNSAFE**").replace("POOLED:", "**POOLED:**")


def markdown_lines(answer: Answer) -> list[str]:
    """The report's "The answer" section."""
    lines = ["## The answer", "", intro(answer), ""]
    if not answer.groups:
        return [*lines, "No results to answer from.", ""]
    for g in answer.groups:
        words = said(g, answer.delta)
        lines += [f"### {group_heading(g)}", "", f"**{words.headline}**", ""]
        lines += [f"- {_bold_unsafe(s)}" for s in words.details]
        lines.append("")
        if isinstance(g, SpeedGroup) and g.effects is not None:
            lines += effects.markdown_lines(g.effects, g.metric_words)
    return lines


def summary_lines(answer: Answer, limit: int = SUMMARY_LINES) -> list[str]:
    """The answer's first lines, for the end of a run's progress output: each group's headline."""
    lines = [f"answer: {g.label}: {said(g, answer.delta).headline}" for g in answer.groups]
    if len(lines) > limit:
        lines = [*lines[: limit - 1], f"answer: ... and {len(lines) - limit + 1} more groups: see the report"]
    return lines


def to_json(answer: Answer) -> dict[str, Any]:
    """The answer as JSON (docs/answer.schema.json): non-finite numbers as null."""
    doc = {
        "version": VERSION,
        "alpha": answer.alpha,
        "delta": answer.delta,
        "confidence": answer.confidence,
        "groups": [_group_json(g, answer.delta) for g in answer.groups],
    }
    out: dict[str, Any] = jsonfile.strict(doc)
    return out


def _interval_json(i: Interval | None) -> dict[str, Any] | None:
    if i is None:
        return None
    return {"value": i.ratio, "ci_low": i.ci_low, "ci_high": i.ci_high, "confidence": i.confidence, "family": i.family}


def _configuration_json(c: Configuration) -> dict[str, Any]:
    doc = asdict(c)
    doc["to_baseline"], doc["to_leader"] = _interval_json(c.to_baseline), _interval_json(c.to_leader)
    return doc


def _work_json(w: Work) -> dict[str, Any]:
    no_ratio = {"value": None, "ci_low": None, "ci_high": None, "confidence": None, "family": None}
    differences = [
        {
            "metric": d.metric,
            "words": d.words,
            "least": d.least,
            "least_does_none": d.does_none,
            "none": list(d.none),
            "more": [{"configuration": n, **(_interval_json(r) or no_ratio)} for n, r in d.more],
            "unsettled": [{"configuration": n, **(_interval_json(r) or no_ratio)} for n, r in d.unsettled],
            "equivalent": list(d.equivalent),
            "standings": [{"configuration": s.configuration, "words": s.words} for s in d.standings],
        }
        for d in w.differences
    ]
    return {
        "compared": list(w.compared),
        "decided": list(w.decided),
        "confidence": w.confidence,
        "delta": w.delta,
        "differences": differences,
    }


def _crash_json(v: CrashVerdict) -> dict[str, Any]:
    doc = asdict(v)
    for internal in ("infrastructure_statuses", "damage_allowed", "not_crashed_why"):  # in the sentence, not the schema
        del doc[internal]
    return {**doc, "text": crash_text(v)}


def _group_json(g: GroupResult, delta: float) -> dict[str, Any]:
    """A group as docs/answer.schema.json has it: a crash group with the speed fields empty."""
    words, group = said(g, delta), g.group
    speed = g if isinstance(g, SpeedGroup) else None
    crash = g if isinstance(g, CrashGroup) else None
    return {
        "key": group.key,
        "label": group.label,
        "workload": group.workload,
        "crash_mode": crash.mode if crash else None,
        "metric": speed.metric if speed else None,
        "metric_words": speed.metric_words if speed else "",
        "direction": speed.direction if speed else None,
        "baseline": group.baseline_name,
        "baseline_cell": group.baseline.id,
        "baseline_rule": group.baseline_rule,
        "verdict": speed.verdict if speed else "crash",
        "best": speed.best if speed else None,
        "leader": speed.leader if speed else None,
        "equivalent": list(speed.equivalent) if speed else [],
        "not_separated": list(speed.not_separated) if speed else [],
        "worse": list(speed.worse) if speed else [],
        "not_enough_data": list(speed.not_enough_data) if speed else [],
        "configurations": [_configuration_json(c) for c in g.configurations],
        "regime": asdict(group.regime),
        "why": asdict(speed.why) if speed and speed.why else None,
        "crash": [_crash_json(v) for v in crash.crash] if crash else [],
        "still_open": [{**asdict(o), "advice": open_advice(o, delta)} for o in speed.still_open] if speed else [],
        "race": race_rule(speed.raced) if speed and speed.raced else None,
        "decided": {"on_time": speed.decided_on_time, "on_work": list(speed.decided_on_work)} if speed else None,
        "work": _work_json(speed.work) if speed and speed.work else None,
        "unflushed": asdict(speed.unflushed) if speed and speed.unflushed else None,
        "outliers": [asdict(o) for o in speed.outliers] if speed else [],
        "rule": speed.rule if speed else None,
        **effects.to_json(speed.effects if speed else None),
        "headline": words.headline,
        "details": list(words.details),
        "sentences": list(words.sentences),
    }
