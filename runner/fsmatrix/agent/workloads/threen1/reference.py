"""Expected 3n+1 results for a range: the published table, else computed here and cached on disk.

``threen1_reference.tsv`` (shipped with the package) holds the published rows. Other ranges are
computed by an implementation independent of the M routine: an array of sequence lengths for the
numbers up to ``end`` and plain iteration above it. The answer is cached in
``$XDG_CACHE_HOME/fsmatrix/threen1_reference.tsv`` (default ``~/.cache``) so a range costs its
computation once. Each cached row carries a SHA-256 of its values: a row whose checksum does not
match (a damaged or hand-edited cache, or one written before checksums) is not trusted but
computed again, and the cache rewritten without it.

``sequence_length`` is a third, deliberately plain implementation (iterate to 1 and count), used to
check a sample of the lengths a run stored.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from array import array
from pathlib import Path

log = logging.getLogger("fsmatrix")

PUBLISHED_TABLE = Path(__file__).with_name("threen1_reference.tsv")
HEADER = "start\tend\tlongest_sequence\tlargest_number"
CACHE_HEADER = HEADER + "\tsha256"
# Part of every checksum: a change of what a row means invalidates every cached row.
CHECKSUM_TAG = "fsmatrix threen1 reference v1"


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


def checksum(start: int, end: int, longest: int, largest: int) -> str:
    """The SHA-256 a cached row carries."""
    return hashlib.sha256(f"{CHECKSUM_TAG}\t{start}\t{end}\t{longest}\t{largest}".encode()).hexdigest()


Refused = tuple[tuple[int, int] | None, str]  # the range a refused row names (if readable), and why


def read_cache(path: Path) -> tuple[dict[tuple[int, int], tuple[int, int]], list[Refused]]:
    """The cache's rows whose checksum matches, and each row that was refused."""
    rows: dict[tuple[int, int], tuple[int, int]] = {}
    refused: list[Refused] = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return rows, refused
    except (OSError, UnicodeDecodeError) as exc:
        return rows, [(None, f"{path}: unreadable ({exc})")]
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("\t")
        if not line.strip() or fields[0] == "start":
            continue
        if len(fields) != 5 or not all(f.isdigit() for f in fields[:4]):
            refused.append((None, f"{path}:{number}: not start, end, longest, largest, sha256: {line!r}"))
            continue
        start, end, longest, largest = (int(f) for f in fields[:4])
        if fields[4] != checksum(start, end, longest, largest):
            refused.append(((start, end), f"{path}:{number}: checksum does not match: {line!r}"))
            continue
        rows[(start, end)] = (longest, largest)
    return rows, refused


def write_cache(path: Path, rows: dict[tuple[int, int], tuple[int, int]]) -> None:
    """Replace the cache with ``rows`` (atomically: a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [CACHE_HEADER] + [
        f"{s}\t{e}\t{lo}\t{la}\t{checksum(s, e, lo, la)}" for (s, e), (lo, la) in sorted(rows.items())
    ]
    fd, tmp = tempfile.mkstemp(prefix=".threen1_reference.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


def sequence_length(n: int) -> tuple[int, list[int]]:
    """Steps from ``n`` to 1 and the numbers on the way (``n`` first, 1 left out), by plain iteration."""
    if n < 1:
        raise ValueError(f"3n+1 sequences start at 1 or above, not {n}")
    path = []
    while n != 1:
        path.append(n)
        n = n // 2 if n % 2 == 0 else 3 * n + 1
    return len(path), path


def reference(start: int, end: int) -> tuple[int, int, str]:
    """(longest sequence, largest number, "published" | "computed") for start..end."""
    longest, largest, source, _ = lookup(start, end)
    return longest, largest, source


def lookup(start: int, end: int) -> tuple[int, int, str, str]:
    """``reference`` plus how the cache served it: "none" (published), "hit", "miss" or
    "refused" (a cached row failed its checksum and was computed again)."""
    published = read_table(PUBLISHED_TABLE)
    if (start, end) in published:
        return (*published[(start, end)], "published", "none")
    cache = cache_file()
    cached, refused = read_cache(cache)
    if refused:  # a damaged (or older-format) row is never trusted: dropped, and recomputed when asked for
        log.warning(
            "3n+1 reference cache: dropping %d damaged or old-format row(s) of %s (first: %s)",
            len(refused),
            cache,
            refused[0][1],
        )
    ours_refused = any(named == (start, end) for named, _ in refused)
    hit = (start, end) in cached
    longest, largest = cached[(start, end)] if hit else compute(start, end)
    if not hit or refused:
        cached[(start, end)] = (longest, largest)
        try:
            write_cache(cache, cached)
        except OSError as exc:  # a read-only home only costs the recomputation next time
            log.info("cannot cache the 3n+1 reference in %s: %s", cache, exc)
    return longest, largest, "computed", "hit" if hit else "refused" if ours_refused else "miss"
