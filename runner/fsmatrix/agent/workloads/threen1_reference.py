"""Expected 3n+1 results for a range: the published table, else computed here and cached on disk.

``threen1_reference.tsv`` (shipped with the package) holds the published rows. Other ranges are
computed by an implementation independent of the M routine: an array of sequence lengths for the
numbers up to ``end`` and plain iteration above it. The answer is cached in
``$XDG_CACHE_HOME/fsmatrix/threen1_reference.tsv`` (default ``~/.cache``) so a range costs its
computation once.
"""

from __future__ import annotations

import logging
import os
from array import array
from pathlib import Path

log = logging.getLogger("fsmatrix")

PUBLISHED_TABLE = Path(__file__).with_name("threen1_reference.tsv")
HEADER = "start\tend\tlongest_sequence\tlargest_number"


def read_table(path: Path) -> dict[tuple[int, int], tuple[int, int]]:
    """{(start, end): (longest, largest)} from a TSV with HEADER's columns; missing file: {}."""
    rows: dict[tuple[int, int], tuple[int, int]] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return rows
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("\t")
        if not line.strip() or fields[0] == "start":
            continue
        if len(fields) != 4 or not all(f.strip().isdigit() for f in fields):
            raise ValueError(f"{path}:{number}: expected 4 tab-separated integers, got {line!r}")
        start, end, longest, largest = (int(f) for f in fields)
        rows[(start, end)] = (longest, largest)
    return rows


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fsmatrix" / "threen1_reference.tsv"


def compute(start: int, end: int) -> tuple[int, int]:
    """(longest sequence, largest number) over the starting numbers start..end."""
    if not 1 <= start <= end:
        raise ValueError(f"need 1 <= start <= end, got {start}..{end}")
    # steps[x] for x <= end, 0 meaning "not known yet" (1 is handled apart: it has 0 steps).
    steps = array("H", bytes(2 * (end + 1)))
    longest = 0
    largest = start
    for n in range(start, end + 1):
        path = []
        x = n
        while x != 1 and (x > end or steps[x] == 0):
            path.append(x)
            x = 3 * x + 1 if x & 1 else x >> 1
        # The rest of the sequence from x on was walked from an earlier start: its numbers are
        # already in `largest`.
        if path:
            largest = max(largest, max(path))
        length = 0 if x == 1 else steps[x]
        for y in reversed(path):
            length += 1
            if y <= end:
                steps[y] = length
        longest = max(longest, length)
    return longest, largest


def reference(start: int, end: int) -> tuple[int, int, str]:
    """(longest sequence, largest number, "published" | "computed") for start..end."""
    published = read_table(PUBLISHED_TABLE)
    if (start, end) in published:
        return (*published[(start, end)], "published")
    cache = cache_file()
    try:
        cached = read_table(cache)
    except ValueError as exc:  # a damaged cache is recomputed, not trusted
        log.warning("ignoring %s", exc)
        cached = {}
    if (start, end) in cached:
        return (*cached[(start, end)], "computed")
    longest, largest = compute(start, end)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        new = not cache.exists() or cache.stat().st_size == 0
        with cache.open("a", encoding="utf-8") as f:
            f.write((HEADER + "\n" if new else "") + f"{start}\t{end}\t{longest}\t{largest}\n")
    except OSError as exc:  # a read-only home only costs the recomputation next time
        log.info("cannot cache the 3n+1 reference in %s: %s", cache, exc)
    return longest, largest, "computed"
