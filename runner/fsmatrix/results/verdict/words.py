"""Small helpers for the answer's sentences: percentages, lists of names."""

from __future__ import annotations

from collections.abc import Sequence


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
