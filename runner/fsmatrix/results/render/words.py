"""Small helpers for the answer's sentences: percentages, lists of names."""

from __future__ import annotations

from collections.abc import Sequence


def pct(fraction: float, digits: int = 3) -> str:
    """0.05 -> "5 %", 0.025 -> "2.5 %" (``digits`` significant digits at most)."""
    return f"{float(f'{fraction * 100:.{digits}g}'):g} %"


def plain(name: str) -> bool:
    """A name that takes a possessive ("xfs's"): one word."""
    return not any(ch in name for ch in " ,=")


def join(items: Sequence[str], names: Sequence[str] | None = None) -> str:
    """A list, with semicolons when a name in it has a comma of its own ("btrfs, gtm.journal=off")."""
    return ("; " if any("," in n for n in (items if names is None else names)) else ", ").join(items)


def and_list(names: Sequence[str]) -> str:
    """ "a, b and c" (semicolons when a name has a comma of its own)."""
    if len(names) == 1:
        return names[0]
    return join(names[:-1]) + ("; and " if any("," in n for n in names) else " and ") + names[-1]
