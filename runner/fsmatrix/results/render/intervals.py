"""Ratios with their intervals on a log axis, 1 marked and the ±δ band shaded: the inline SVG of a
group's effects (render/effects.py) and of a search's effects and candidates (render/search.py).
Written by hand, not with matplotlib (charts.py): a few lines of SVG, and no second of imports."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from fsmatrix.results.render.words import pct

# The four words of an effect (verdict/effects.py, verdict/space.py) as colours.
WORDS_COLOUR = {"matters": "#b03030", "equivalent": "#2f7d32", "unsettled": "#c07800", "not separated": "#555"}
ROW, LEFT, WIDTH, PAD = 22, 300, 360, 10


@dataclass(frozen=True)
class Bar:
    """One row: its label, the ratio and its interval, the colour, and what hovering the point says."""

    label: str
    ratio: float
    low: float
    high: float
    colour: str
    title: str = ""


def number(value: float) -> str:
    """A ratio's digits: two decimals, three significant digits from 10 on."""
    return f"{value:.2f}" if value < 10 else f"{value:.3g}"


def interval_svg(bars: Sequence[Bar], delta: float, label: str, css_class: str, left: int = LEFT) -> str:
    """The rows in the order given; "" when there is none or an interval reaches 0 (no log axis)."""
    if not bars or any(b.low <= 0 for b in bars):
        return ""
    lo_b, hi_b = 1 / (1 + delta), 1 + delta
    low = min(min(b.low for b in bars), lo_b) / 1.05
    high = max(max(b.high for b in bars), hi_b) * 1.05
    span = math.log(high) - math.log(low)

    def at(v: float) -> float:
        return left + WIDTH * (math.log(v) - math.log(low)) / span

    height = PAD * 2 + ROW * (len(bars) + 1)
    parts = [
        f'<svg class="{css_class}" xmlns="http://www.w3.org/2000/svg" width="{left + WIDTH + 80}" height="{height}" '
        f'role="img" aria-label="{escape(label)}">',
        f'<rect x="{at(lo_b):.1f}" y="{PAD}" width="{at(hi_b) - at(lo_b):.1f}" height="{ROW * len(bars)}" '
        f'fill="#e8e8e8"><title>±{pct(delta)}</title></rect>',
        f'<line x1="{at(1):.1f}" y1="{PAD}" x2="{at(1):.1f}" y2="{PAD + ROW * len(bars)}" stroke="#888"/>',
    ]
    for i, b in enumerate(bars):
        y = PAD + ROW * i + ROW / 2
        point = f"<title>{escape(b.title)}</title></circle>" if b.title else "</circle>"
        parts += [
            f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end" font-size="12">{escape(b.label)}</text>',
            f'<line x1="{at(b.low):.1f}" y1="{y:.1f}" x2="{at(b.high):.1f}" y2="{y:.1f}" stroke="{b.colour}" '
            f'stroke-width="2"/>',
            f'<circle cx="{at(b.ratio):.1f}" cy="{y:.1f}" r="4" fill="{b.colour}">{point}',
            f'<text x="{left + WIDTH + 6}" y="{y + 4:.1f}" font-size="11">{number(b.ratio)}×</text>',
        ]
    axis_y = PAD + ROW * len(bars) + 14
    # the axis's ends and 1; the band's edges only where their labels do not run into 1's (a wide axis
    # leaves the ±δ band a few pixels: "0.95", "1" and "1.05" printed over each other)
    marks = [low, 1.0, high] + [v for v in (lo_b, hi_b) if abs(at(v) - at(1.0)) >= 30]
    for v in sorted(marks):
        parts.append(f'<text x="{at(v):.1f}" y="{axis_y}" text-anchor="middle" font-size="10">{number(v)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
