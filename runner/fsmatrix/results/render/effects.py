"""A group's effects (verdict/effects.py) in words, tables, JSON and a chart: the headline naming the
settings that matter, largest first; a table of each setting and each resolved interaction with its
ratio, interval, words, share and aliases; the design the cells form; the lack-of-fit line; the JSON of
docs/answer.schema.json; and the effects chart of the HTML page (each ratio with its interval, sorted,
the ±δ band shaded)."""

from __future__ import annotations

from html import escape
from typing import Any

from fsmatrix.results.render.intervals import WORDS_COLOUR, Bar, interval_svg, number
from fsmatrix.results.render.words import pct
from fsmatrix.results.verdict.effects import SETTLE_MAX, SETTLE_POWER, Effect, Effects

EMPTY = '""'  # an empty setting's value (mount_options "")
ROMAN = {3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII", 8: "VIII"}
NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}


def ratio_text(e: Effect) -> str:
    """ "1.7× [1.6, 1.8]": two significant digits, three where the interval needs them to differ."""
    return f"{number(e.ratio)}× [{number(e.ci_low)}, {number(e.ci_high)}]"


def _term(e: Effect) -> str:
    """ "gtm.global_buffers 35000 → 64", or an interaction's two names."""
    if len(e.settings) != 1:
        return e.name
    return f"{e.name} {e.low or EMPTY} → {e.high or EMPTY}"


def headline(e: Effects, metric_words: str) -> str:
    """ "What moves elapsed time here: A 35000 → 64 1.7× [1.6, 1.8]; B ... ; the other three within ±5 %." """
    if not e.fitted:
        return f"Effects of the settings: {e.reason}."
    matters = e.matters()
    rest = [x for x in e.effects if x.words != "matters"]
    parts = [f"{_term(x)} {ratio_text(x)}" for x in matters]
    equivalent = [x for x in rest if x.words == "equivalent"]
    tail = []
    if equivalent and len(equivalent) == len(rest):
        n = len(rest)
        tail.append(
            f"the other {NUMBERS.get(n, str(n))} within ±{pct(e.delta)}"
            if matters
            else f"every setting within ±{pct(e.delta)}"
        )
    else:
        if equivalent:
            tail.append(f"within ±{pct(e.delta)}: {', '.join(x.name for x in equivalent)}")
        for words in ("unsettled", "not separated"):
            named = [x.name for x in rest if x.words == words]
            if named:
                tail.append(f"{'shown, size unsettled' if words == 'unsettled' else words}: {', '.join(named)}")
    if not parts:
        return f"No setting moves {metric_words} here beyond ±{pct(e.delta)}" + (
            f"; {'; '.join(tail)}." if tail else "."
        )
    return f"What moves {metric_words} here: {'; '.join([*parts, *tail])}."


def design_text(e: Effects) -> str:
    if e.kind == "fractional":
        res = f", resolution {ROMAN.get(e.resolution, str(e.resolution))}" if e.resolution else ""
        shape = f"a fraction{res}: {e.runs} of the full cross's {e.full_runs} cells"
    elif e.kind == "full":
        shape = f"the full cross: {e.runs} cells"
    elif e.kind in ("screening", "optimal"):
        noun = "a Plackett–Burman screening design" if e.kind == "screening" else "a D-optimal design"
        shape = f"{noun}: {e.runs} of the full cross's {e.full_runs} cells"
    else:
        shape = f"{e.runs} of the full cross's {e.full_runs} cells"
    return shape


def settle_text(e: Effects) -> str:
    """ "about 7 runs per cell would settle every effect and interaction within ±5 % (...)"."""
    n = e.settle_repeats
    assert n is not None
    many = f"more than {SETTLE_MAX}" if n > SETTLE_MAX else f"about {n}"
    return (
        f"{many} runs per cell would settle every effect and interaction still open within ±{pct(e.delta)} "
        f"({pct(SETTLE_POWER)} of the time: inside ±{pct(e.delta)} if it is nothing, beyond it if twice that)"
    )


WORDS = {
    "matters": "matters",
    "equivalent": "equivalent",
    "unsettled": "shown, size unsettled",
    "not separated": "not separated",
}


def _row(x: Effect) -> str:
    share = pct(x.share, 2) if x.share is not None else "–"
    aliased = ", ".join(x.aliased_with) or "–"
    return f"| {_term(x)} | {ratio_text(x)} | {WORDS[x.words]} | {share} | {aliased} |"


def markdown_lines(e: Effects, metric_words: str) -> list[str]:
    """A group's "Effects of the settings" block of report.md."""
    lines = [f"**Effects of the settings on {metric_words}.** {headline(e, metric_words)}", ""]
    lines.append(f"- Design: {design_text(e)}.")
    if e.missing:
        lines.append(f"- Missing (no usable run; aliases worked out on what ran): {', '.join(e.missing)}.")
    if not e.fitted:
        return [*lines, ""]
    lines.append(
        f"- Each ratio is high against low averaged over the other settings (a linear model on the logs, "
        f"the round as a block, standard errors robust to unequal spreads); the {e.family} effects and "
        f"interactions hold together at {pct(1 - e.alpha)} (Bonferroni: each at 1 − α/{e.family}); "
        f"pure error from {e.pure_error_df} degrees of freedom."
    )
    if e.lack_of_fit is not None:
        lof = e.lack_of_fit
        verdict = "the model leaves something out" if lof.p_value < e.alpha else "no sign of it"
        lines.append(
            f"- Lack of fit (what the settings and their pairs leave in the cells' means): "
            f"F({lof.df_model}, {lof.df_error}) = {lof.f:.2f}, p = {lof.p_value:.2g}: {verdict}."
        )
    if e.settle_repeats is not None:
        lines.append(f"- To settle: {settle_text(e)}.")
    lines += ["", "| setting | ratio [interval] | words | share | aliased with |", "|---|---|---|---|---|"]
    lines += [_row(x) for x in sorted(e.effects, key=lambda x: -x.size)]
    if e.interactions:
        lines += ["", "| interaction (alike against unlike) | ratio [interval] | words | share | aliased with |"]
        lines += ["|---|---|---|---|---|", *(_row(x) for x in sorted(e.interactions, key=lambda x: -x.size))]
    return [*lines, ""]


def _effect_json(x: Effect) -> dict[str, Any]:
    name: dict[str, Any] = {"setting": x.settings[0]} if len(x.settings) == 1 else {"settings": list(x.settings)}
    return {
        **name,
        "low": x.low,
        "high": x.high,
        "ratio": x.ratio,
        "ci_low": x.ci_low,
        "ci_high": x.ci_high,
        "words": x.words,
        "share": x.share,
        "aliased_with": list(x.aliased_with),
    }


def to_json(e: Effects | None) -> dict[str, Any]:
    """A group's ``design``, ``effects`` and ``interactions`` (docs/answer.schema.json)."""
    if e is None:
        return {"design": None, "effects": [], "interactions": []}
    design = {"kind": e.kind, "runs": e.runs, "full_runs": e.full_runs, "resolution": e.resolution}
    return {
        "design": {**design, "missing": list(e.missing), "reason": e.reason, "settle_repeats": e.settle_repeats},
        "effects": [_effect_json(x) for x in e.effects],
        "interactions": [_effect_json(x) for x in e.interactions],
    }


def html_parts(e: Effects, metric_words: str) -> list[str]:
    """The same block for the HTML page: the headline, the design, the chart and the table."""
    parts = [
        f"<h4>Effects of the settings on {escape(metric_words)}</h4>",
        f'<p class="headline"><strong>{escape(headline(e, metric_words))}</strong></p>',
        f"<p>Design: {escape(design_text(e))}.</p>",
    ]
    if e.missing:
        parts.append(f"<p>Missing (no usable run): {escape(', '.join(e.missing))}.</p>")
    if e.settle_repeats is not None:
        parts.append(f"<p>To settle: {escape(settle_text(e))}.</p>")
    svg = chart_svg(e) if e.fitted else ""
    if svg:
        caption = (
            f"each setting's {metric_words} high against low, averaged over the others, with its interval "
            f"(all {e.family} hold together at {pct(1 - e.alpha)}); shaded: within ±{pct(e.delta)}"
        )
        parts.append(f'<figure class="chart effects">{svg}<figcaption>{escape(caption)}</figcaption></figure>')
    rows = [_row(x).strip("| ").split(" | ") for x in sorted((*e.effects, *e.interactions), key=lambda x: -x.size)]
    if rows:
        head = "".join(f"<th>{h}</th>" for h in ("setting", "ratio [interval]", "words", "share", "aliased with"))
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
        parts.append(f'<table class="effects"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')
    return parts


# ----------------------------------------------------------------------------------- the chart


def chart_svg(e: Effects) -> str:
    """Each setting's (and interaction's) ratio with its interval on a log axis, largest first, the
    ±δ band shaded and 1 marked; an SVG for the HTML page."""
    terms = sorted((*e.effects, *e.interactions), key=lambda x: -x.size)
    bars = [
        Bar(_term(x), x.ratio, x.ci_low, x.ci_high, WORDS_COLOUR[x.words], f"{ratio_text(x)}: {WORDS[x.words]}")
        for x in terms
    ]
    return interval_svg(bars, e.delta, "effects of the settings", "effects")
