"""The 3n+1 benchmark's algorithm in one Python process, with a dict where GT.M has the database.

It does exactly what one GT.M worker does (same lookups, same stores, same spelled keys and values),
so its read and update counts equal a single-worker GT.M run's, and its time shows what the same
work costs without a database.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

WORDS_FILE = Path(__file__).with_name("digit_words.txt")
KEY_MODES = ("spelled", "integer")


def load_digit_words(path: Path = WORDS_FILE) -> list[str]:
    """The ten digit words, digit 0 first; lines starting with "#" and blank lines are skipped."""
    lines = path.read_text(encoding="utf-8").splitlines()
    words = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    if len(words) != 10 or len(set(words)) != 10 or any(len(w.split()) != 1 for w in words):
        raise ValueError(f"{path}: expected 10 distinct one-word lines, got {words!r}")
    return words


def spelling_table(words: list[str]) -> dict[int, str]:
    """A str.translate table that turns each digit into its word and a space."""
    return {ord(str(d)): w + " " for d, w in enumerate(words)}


def spell(number: int, table: dict[int, str]) -> str:
    """27 -> "deux सात": each decimal digit as its word, single spaces between."""
    return str(number).translate(table)[:-1]


def unspell(text: str, digits: dict[str, str]) -> int:
    """The inverse of ``spell``; ``digits`` maps each word to its digit character."""
    return int("".join(digits[w] for w in text.split(" ")))


def run_in_memory(start: int, end: int, keys: str = "spelled") -> dict[str, Any]:
    """Run start..end as one worker would; returns the counters and the results."""
    if keys not in KEY_MODES:
        raise ValueError(f"keys must be one of {', '.join(KEY_MODES)}, not {keys!r}")
    if not 1 <= start <= end:
        raise ValueError(f"need 1 <= start <= end, got {start}..{end}")
    words = load_digit_words()
    table = spelling_table(words)
    digits = {w: str(d) for d, w in enumerate(words)}
    spelled = keys == "spelled"
    db: dict[Any, Any] = {}
    t0, c0 = time.perf_counter(), time.process_time()
    db[spell(1, table) if spelled else 1] = spell(0, table) if spelled else 0
    reads = updates = longest = 0
    largest = start
    for n in range(start, end + 1):
        largest = max(largest, n)
        stack = []
        x = n
        while True:
            value = db.get(spell(x, table) if spelled else x)
            reads += 1
            if value is not None:
                break
            stack.append(x)
            x = 3 * x + 1 if x & 1 else x // 2
            largest = max(largest, x)
        length: int = unspell(value, digits) if spelled else value
        while stack:
            length += 1
            y = stack.pop()
            if spelled:
                db[spell(y, table)] = spell(length, table)
            else:
                db[y] = length
            updates += 1
        longest = max(longest, length)
    return {
        "keys": keys,
        "reads": reads,
        "updates": updates,
        "longest_sequence": longest,
        "largest_number": largest,
        "entries": len(db),
        "elapsed_s": round(time.perf_counter() - t0, 6),
        "cpu_s": round(time.process_time() - c0, 6),
    }
