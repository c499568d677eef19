"""A search's answer for people (``fsmatrix search``; docs/search.md): Markdown, a self-contained HTML
page (the report's style and Content-Security-Policy: nothing fetched), and the files written beside
the search's stage folders (search.md, search.html, search.json: the answer's JSON,
``SearchAnswer.to_json``, inside the search's record)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from pathlib import Path

from fsmatrix.agent import workloads
from fsmatrix.results.render.intervals import PAD, ROW, WIDTH, WORDS_COLOUR, Bar, interval_svg
from fsmatrix.results.render.words import pct
from fsmatrix.results.verdict.search import SearchAnswer
from fsmatrix.results.verdict.space import Contrast, SettingEffect, Space
from fsmatrix.results.verdict.speed import SHORT_METRIC

FILES = ("search.md", "search.html")


def metric_words(metric: str) -> str:
    """A metric in the answer's words ("elapsed time", "TPS"): the title of the workload's metric of
    that name, as the report says it; the name itself when no workload has it."""
    if metric in SHORT_METRIC:
        return SHORT_METRIC[metric]
    for w in workloads.all_workloads():
        m = w.primary_metric
        if m.name == metric:
            title = m.title.split(" (")[0]
            return title[:1].lower() + title[1:]
    return metric


def _x(value: float) -> str:
    return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"


def _interval(low: float, high: float) -> str:
    return f"[{low:.2f}, {high:.2f}]"


def _fresh_runs(answer: SearchAnswer) -> int | None:
    """Runs of each configuration the confirmation ran (its stage's runs over its configurations)."""
    stage = next((s for s in answer.stages if s.name == "confirm"), None)
    return stage.runs // stage.configurations if stage is not None and stage.configurations else None


def headline(answer: SearchAnswer) -> str:
    """The first line: the configuration found, its observed ratio to the baseline, the model's
    prediction and whether it held; or why there is no answer."""
    space = answer.space
    if answer.best is None:
        return f"No answer: {answer.reason or 'the search found no configuration'}."
    label = space.label(answer.best)
    found = "the baseline itself" if label == "baseline" else label
    words = metric_words(space.metric)
    text = _found_text(answer, found)
    if answer.observed is not None:
        o = answer.observed
        fresh = _fresh_runs(answer)
        on = f" on {fresh} fresh runs each" if fresh else ""
        text += f" — {words} {_x(o.ratio)} the baseline {_interval(o.ci_low, o.ci_high)}{on}"
        text += _settle_text(answer)
    if answer.predicted is not None:
        p = answer.predicted
        text += f"; the model predicted {_x(p.ratio)} {_interval(p.ci_low, p.ci_high)}"
    if answer.model_held is True:
        text += ": it held."
    elif answer.model_held is False:
        text += (
            ": it did not hold. The model was wrong there, so this answer rests on the candidates' own runs "
            "alone, and nothing is said of the configurations never run."
        )
    else:
        text += " (no confirmation ran)." if answer.observed is None else "."
    return text


def _found_text(answer: SearchAnswer, found: str) -> str:
    """The headline's start: a winner only where the confirmation showed it better than the baseline."""
    shown, delta = answer.shown, pct(answer.delta)
    if shown == "not separated":
        return f"Nothing shown better than the baseline: the search's best, {found}, is not separated from it"
    if shown == "equivalent":
        return f"Nothing better than the baseline: the search's best, {found}, is equivalent to it within ±{delta}"
    if shown == "worse":
        return f"Nothing better than the baseline: the search's best, {found}, was worse on fresh runs"
    return f"Best found: {found}" + (", better than the baseline" if shown == "better" else "")


def _settle_text(answer: SearchAnswer) -> str:
    if answer.shown != "not separated":
        return ""
    n = answer.settle_repeats
    each = f"{n} fresh runs each" if n is not None else "more than 30 fresh runs each"
    return f" ({each} would settle ±{pct(answer.delta)})"


def effect_text(e: SettingEffect) -> str:
    return f"{_x(e.ratio)} {_interval(e.ci_low, e.ci_high)}"


def fixed_line(e: SettingEffect, delta: float) -> str:
    """A setting fixed at its default, and the effect that let it be."""
    return (
        f"{e.setting} fixed at {e.default}: {e.level} gave {effect_text(e)}, {e.words} "
        f"(within ±{pct(delta)} of the default)"
    )


def untried_line(answer: SearchAnswer) -> str:
    """What was never run and the model's bound on it (or why there is none)."""
    size = len(answer.space.configurations)
    head = f"{answer.untried} of the space's {size} configurations were never run"
    if answer.untried == 0:
        return f"Every one of the space's {size} configurations ran: nothing rests on the model's bound."
    if answer.model_held is False:
        return f"{head}: the model did not hold at the confirmation, so it bounds none of them."
    if answer.untried_bound is None:
        return f"{head}: the model gives no bound on them."
    held = "yes" if answer.bound_holds else "no"
    return (
        f"{head}: the model bounds every one at most {_better_by(answer)} than the one found "
        f"(at most δ = {pct(answer.delta)}: {held}), assuming {answer.assumption}."
    )


def _better_by(answer: SearchAnswer) -> str:
    """``untried_bound`` (a ratio > 1 in the better direction) in the metric's own terms: "0.80× the
    elapsed time" where lower is better (a time cannot fall by more than 100 %), "1.25× the TPS" where higher."""
    bound = max(answer.untried_bound or 1.0, 1.0)
    words = metric_words(answer.space.metric)
    if answer.space.direction == "lower":
        return f"{_x(1 / bound)} the {words}, {pct(bound - 1)} better,"
    return f"{_x(bound)} the {words}, {pct(bound - 1)} better,"


def runs_line(answer: SearchAnswer) -> str:
    share = answer.runs_used / answer.full_cross_runs if answer.full_cross_runs else 0.0
    return (
        f"Runs used: {answer.runs_used}, against the full cross's {answer.full_cross_runs} at 3 repeats "
        f"({pct(share)})."
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def _effect_rows(answer: SearchAnswer) -> list[list[str]]:
    ordered = sorted(answer.effects, key=lambda e: -abs(math.log(e.ratio)) if e.ratio > 0 else 0.0)
    return [[e.setting, f"{e.level} against {e.default}", effect_text(e), e.words] for e in ordered]


def _candidate_rows(answer: SearchAnswer) -> list[list[str]]:
    space = answer.space
    return [
        [space.label(c.config), f"{_x(c.ratio)} {_interval(c.ci_low, c.ci_high)}", "yes" if c.shown_worse else "no"]
        for c in answer.candidates
    ]


def markdown(answer: SearchAnswer, title: str) -> str:
    """The answer as Markdown (docs/search.md shows one)."""
    space = answer.space
    words = metric_words(space.metric)
    lines = [f"# fsmatrix search: {title}", "", f"**{headline(answer)}**", ""]
    better = "lower" if space.direction == "lower" else "higher"
    lines += [f"{words} ({better} is better); δ {pct(answer.delta)}, α {pct(answer.alpha)}.", ""]
    lines += [*(f"- Note: {n}" for n in answer.notes), *([""] if answer.notes else [])]
    if answer.effects:
        lines += ["## What each setting does", ""]
        lines += [f"Each setting's {words} at a level against its default, averaged over the others:", ""]
        lines += [*_table(("setting", "level", "ratio [interval]", "words"), _effect_rows(answer)), ""]
    if answer.fixed:
        lines += ["## Settings fixed at their default", ""]
        lines += [f"- {fixed_line(e, answer.delta)}" for e in answer.fixed] + [""]
    if answer.candidates:
        lines += ["## Candidates raced", ""]
        lines += [f"Each against the model's predicted best (intervals simultaneous over the space), {words}:", ""]
        lines += [*_table(("configuration", "predicted ratio [interval]", "shown worse"), _candidate_rows(answer)), ""]
    lines += ["## What was never run", "", untried_line(answer), ""]
    lines += ["## Runs", "", runs_line(answer), ""]
    if answer.stages:
        rows = [[s.name, s.design, str(s.configurations), str(s.runs)] for s in answer.stages]
        lines += [*_table(("stage", "design", "configurations", "runs"), rows), ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- the page


def stages_svg(answer: SearchAnswer) -> str:
    """The stages as a picture: each stage's runs as a bar, the full cross's runs as the scale."""
    if not answer.stages:
        return ""
    most = max(answer.full_cross_runs, *(s.runs for s in answer.stages), 1)
    height = PAD * 2 + ROW * (len(answer.stages) + 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{160 + WIDTH + 160}" height="{height}" role="img" '
             'aria-label="the stages and their runs">']  # fmt: skip
    rows = [(f"{s.name}: {s.design}", s.runs, "#4a7") for s in answer.stages]
    rows.append((f"full cross at 3 repeats ({len(answer.space.configurations)} configurations)", most, "#bbb"))
    for i, (text, runs, colour) in enumerate(rows):
        y = PAD + ROW * i
        width = WIDTH * runs / most
        parts += [
            f'<text x="0" y="{y + 15}" font-size="12">{escape(text[:40])}</text>',
            f'<rect x="300" y="{y + 4}" width="{width:.1f}" height="{ROW - 8}" fill="{colour}"/>',
            f'<text x="{306 + width:.1f}" y="{y + 15}" font-size="11">{runs} runs</text>',
        ]
    parts.append("</svg>")
    return "\n".join(parts)


def _effect_bars(effects: Sequence[SettingEffect]) -> list[Bar]:
    return [
        Bar(f"{e.setting}={e.level}", e.ratio, e.ci_low, e.ci_high, WORDS_COLOUR.get(e.words, "#555"), effect_text(e))
        for e in effects
    ]


def _candidate_bars(space: Space, candidates: Sequence[Contrast]) -> list[Bar]:
    return [
        Bar(
            space.label(c.config)[:48],
            c.ratio,
            c.ci_low,
            c.ci_high,
            "#b03030" if c.shown_worse else "#2f7d32",
            f"{_x(c.ratio)} {_interval(c.ci_low, c.ci_high)}",
        )
        for c in candidates
    ]


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(svg: str, caption: str) -> list[str]:
    return [f'<figure class="chart">{svg}<figcaption>{escape(caption)}</figcaption></figure>'] if svg else []


def html_page(answer: SearchAnswer, title: str) -> str:
    """The answer as one self-contained HTML page: the headline, the effects with their chart, the
    settings fixed, the candidates with their intervals, what was never run, the stages as a picture."""
    from fsmatrix.results.render.page import CSP, STYLE

    words = metric_words(answer.space.metric)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>fsmatrix search: {escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>fsmatrix search: {escape(title)}</h1>",
        f'<section class="answer"><p class="headline"><strong>{escape(headline(answer))}</strong></p></section>',
    ]
    parts += [f"<p>Note: {escape(n)}</p>" for n in answer.notes]
    if answer.effects:
        parts.append("<h2>What each setting does</h2>")
        caption = f"each setting's {words} at a level against its default; shaded: within ±{pct(answer.delta)}"
        svg = interval_svg(_effect_bars(answer.effects), answer.delta, "effects", "effects", left=320)
        parts += _figure(svg, caption)
        parts.append(_html_table(("setting", "level", "ratio [interval]", "words"), _effect_rows(answer)))
    if answer.fixed:
        parts.append("<h2>Settings fixed at their default</h2><ul>")
        parts += [f"<li>{escape(fixed_line(e, answer.delta))}</li>" for e in answer.fixed] + ["</ul>"]
    if answer.candidates:
        parts.append("<h2>Candidates raced</h2>")
        caption = f"each candidate's predicted {words} against the predicted best, simultaneous over the space"
        svg = interval_svg(
            _candidate_bars(answer.space, answer.candidates), answer.delta, "candidates", "candidates", left=320
        )
        parts += _figure(svg, caption)
        rows = _candidate_rows(answer)
        parts.append(_html_table(("configuration", "predicted ratio [interval]", "shown worse"), rows))
    parts += ["<h2>What was never run</h2>", f"<p>{escape(untried_line(answer))}</p>"]
    parts += ["<h2>Runs</h2>", f"<p>{escape(runs_line(answer))}</p>"]
    parts += _figure(stages_svg(answer), "the runs of each stage, against the full cross's")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_answer(answer: SearchAnswer, title: str, directory: Path) -> list[Path]:
    """search.md and search.html in ``directory`` (each written whole, then moved into place)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in zip(FILES, (markdown(answer, title), html_page(answer, title)), strict=True):
        path = directory / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    return written
