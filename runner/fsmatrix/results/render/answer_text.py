"""The answer rendered: its Markdown section, the run's closing lines, and its JSON
(docs/answer.schema.json)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fsmatrix.agent import jsonfile
from fsmatrix.results.verdict.answer import VERSION, Answer, GroupResult
from fsmatrix.results.verdict.words import _pct

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
    doc = {"version": VERSION, **asdict(answer)}
    for g, group in zip(doc["groups"], answer.groups, strict=True):
        g["sentences"] = list(group.sentences)
    out: dict[str, Any] = jsonfile.strict(doc)
    return out
