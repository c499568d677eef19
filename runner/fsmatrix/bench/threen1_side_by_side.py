"""3n+1 next to the published program: ``python -m fsmatrix.bench.threen1_side_by_side PUBLISHED.m``.

Runs fsmatrix's 3n+1 and the published program (``threeen1f.m`` from YottaDB's test repository,
``v62002/inref/threeen1f.m``: fetch it yourself, fsmatrix does not ship it) on the same range, with
the same number of workers and block, each on a fresh database built from the same GT.M settings
(fsmatrix's defaults: 4 KiB blocks, 35,000 global buffers, before-image journaling), in a directory
on this machine (no loop device, no root needed). Prints a Markdown table of what GT.M counted for
each (``dse dump -fileheader -gvstat``), the programs' own read and update counts and the database and
journal sizes, each with its tolerance; exits 1 when one is outside it, 2 on bad input.

The tolerances (issue 18): reads, updates, read-only TP transactions, database and journal bytes
within 5 %; read-write TP transactions within 5 of the published count once fsmatrix's departure
(``^highest`` kept in the per-sequence transaction) is taken off: that adds the transactions that
set ``^highest`` but not ``^result``, which fsmatrix counts itself.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from fsmatrix.agent import proc, provenance
from fsmatrix.agent.databases import gtm
from fsmatrix.agent.workloads.threen1 import run as threen1_run
from fsmatrix.agent.workloads.threen1.params import Params
from fsmatrix.errors import exit_with, interrupt_on_sigterm

PCT = 0.05  # reads, updates, read-only transactions, bytes
READ_WRITE_SLACK = 5  # read-write transactions, after the departure's own


@dataclass(frozen=True)
class Side:
    """One program's figures for one run."""

    reads: int  # the program's own count (^reads)
    updates: int
    longest: int
    largest: int
    counters: dict[str, int]  # GT.M's, for the run
    database_bytes: int
    journal_bytes: int
    elapsed_s: float
    departure_rw: int = 0  # read-write transactions only the departure makes (fsmatrix's side)


_NUMBER = re.compile(r"^[0-9][0-9,]*$")


def parse_published_line(text: str, workers: int) -> dict[str, int]:
    """The published program's result line: start, end, streams, block, longest, largest, seconds,
    updates, reads (then the rates). It corrects the number of streams up to twice the CPUs and the
    block down to the range / streams, shown as "(asked->used)": such a run is not side by side."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the published program printed nothing")
    line = lines[-1]
    if "->" in line:
        raise ValueError(
            f"the published program changed the streams or the block ({line.strip()}): it runs at least twice "
            f"as many streams as CPUs ({os.cpu_count()}) here; ask for that many workers"
        )
    tokens = line.split()
    if len(tokens) < 9 or not all(_NUMBER.match(t) for t in tokens[:9]):
        raise ValueError(f"cannot read the published program's result line: {line!r}")
    names = ("start", "end", "streams", "block", "longest", "largest", "seconds", "updates", "reads")
    values = {n: int(t.replace(",", "")) for n, t in zip(names, tokens, strict=False)}
    if values["streams"] != workers:
        raise ValueError(f"the published program ran {values['streams']} streams, not {workers}")
    return values


@dataclass(frozen=True)
class Threen1Input:
    """What both programs are asked: the numbers ``start``..``end`` in ``workers`` streams,
    ``block`` numbers at a time."""

    start: int
    end: int
    workers: int
    block: int


def run_published(program: Path, asked: Threen1Input, settings: gtm.Settings, base: Path) -> Side:
    """The published program on a fresh database under ``base`` (the routine is compiled from a copy)."""
    start, end, workers, block = asked.start, asked.end, asked.workers, asked.block
    with gtm.opened(
        settings, gtm.DatabaseLocation(base / "data", base / "data", base / "scratch", "published")
    ) as session:
        db = session.db
        gtm.compile_routine(db, program)
        before = gtm.parse_gvstat(gtm.dump_gvstat(db))
        t0 = time.monotonic()
        out = proc.run(
            [db.tool("mumps"), "-run", program.stem],
            env=db.env(),
            input=f"{start} {end} {workers} {block}\n",
            timeout=86400,
            cwd=base / "scratch",
        )
        elapsed = time.monotonic() - t0
        counters = gtm.counter_delta(before, gtm.parse_gvstat(gtm.dump_gvstat(db)))
    values = parse_published_line(out.stdout, workers)
    return Side(
        reads=values["reads"],
        updates=values["updates"],
        longest=values["longest"],
        largest=values["largest"],
        counters=counters,
        database_bytes=db.dat.stat().st_size,
        journal_bytes=sum(p.stat().st_size for p in gtm.journal_files(db)),
        elapsed_s=round(elapsed, 2),
    )


def run_ours(asked: Threen1Input, keys: str, settings: gtm.Settings, base: Path) -> Side:
    """fsmatrix's 3n+1 (``workload threen1``) on a fresh database under ``base``; it must pass its checks."""
    out = threen1_run.run_standalone(
        Params.from_mapping(
            {"start": asked.start, "end": asked.end, "workers": asked.workers, "block": asked.block, "keys": keys}
        ),
        base,
        gtm=_as_mapping(settings),
    )
    if out.verification["status"] != "passed":
        raise RuntimeError(f"fsmatrix's 3n+1 failed its verification: {out.verification['message']}")
    m = out.metrics
    return Side(
        reads=int(m["reads"]),
        updates=int(m["updates"]),
        longest=int(m["longest_sequence"]),
        largest=int(m["largest_number"]),
        counters=dict(out.details["gtm"]["counters"]),
        database_bytes=int(m["database_bytes"]),
        journal_bytes=int(m["journal_bytes"]),
        elapsed_s=float(m["elapsed_s"]),
        departure_rw=int(out.details["transactions"]["read_write_highest_only"]),
    )


def _as_mapping(settings: gtm.Settings) -> dict[str, object]:
    return {k: getattr(settings, k) for k in gtm.DEFAULT_SETTINGS}


@dataclass(frozen=True)
class Row:
    name: str
    ours: int | float
    published: int | float
    rule: str
    ok: bool | None  # None: reported, not judged


def compare(ours: Side, published: Side) -> list[Row]:
    """The table's rows: each figure of both sides with its rule."""

    def pct(name: str, a: int, b: int) -> Row:
        return Row(name, a, b, "within 5 %", abs(a - b) <= PCT * b)

    c, p = ours.counters, published.counters
    rw_equivalent = c.get("TTW", 0) - ours.departure_rw
    return [
        Row("longest sequence", ours.longest, published.longest, "equal", ours.longest == published.longest),
        Row("largest number", ours.largest, published.largest, "equal", ours.largest == published.largest),
        pct("reads (the programs' own count)", ours.reads, published.reads),
        pct("updates (the programs' own count)", ours.updates, published.updates),
        pct("GT.M SET", c.get("SET", 0), p.get("SET", 0)),
        pct("GT.M GET + DTA (global reads)", c.get("GET", 0) + c.get("DTA", 0), p.get("GET", 0) + p.get("DTA", 0)),
        pct("GT.M TTR (read-only TP transactions)", c.get("TTR", 0), p.get("TTR", 0)),
        Row("GT.M TTW (read-write TP transactions)", c.get("TTW", 0), p.get("TTW", 0), "reported", None),
        Row(
            f"TTW without the departure's {ours.departure_rw} (^highest set, ^result not)",
            rw_equivalent,
            p.get("TTW", 0),
            f"within {READ_WRITE_SLACK}",
            abs(rw_equivalent - p.get("TTW", 0)) <= READ_WRITE_SLACK,
        ),
        pct("database bytes", ours.database_bytes, published.database_bytes),
        pct("journal bytes", ours.journal_bytes, published.journal_bytes),
        Row("elapsed s (noisy here)", ours.elapsed_s, published.elapsed_s, "reported", None),
    ]


def table(rows: list[Row]) -> str:
    lines = ["| figure | fsmatrix | published | difference | rule | |", "|---|---|---|---|---|---|"]
    for r in rows:
        diff = f"{(r.ours - r.published) / r.published:+.2%}" if r.published else "-"
        mark = "" if r.ok is None else ("ok" if r.ok else "**out**")
        fmt = ",.2f" if isinstance(r.ours, float) else ","
        lines.append(f"| {r.name} | {r.ours:{fmt}} | {r.published:{fmt}} | {diff} | {r.rule} | {mark} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    interrupt_on_sigterm()  # a timeout's SIGTERM unmounts and detaches as Ctrl-C does
    parser = argparse.ArgumentParser(
        prog="python -m fsmatrix.bench.threen1_side_by_side", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("published", type=Path, help="the published program, threeen1f.m")
    parser.add_argument("--start", type=int, default=1)
    parser.add_argument("--end", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--block", type=int, default=50_000)
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"), help="where the two databases go (%(default)s)")
    args = parser.parse_args(argv)
    program: Path = args.published
    if not program.is_file() or program.suffix != ".m":
        print(f"error: {program} is not an M routine file (the published threeen1f.m)", file=sys.stderr)
        return 2
    if not 1 <= args.start <= args.end or args.workers < 1 or args.block < 1:
        print("error: need 1 <= --start <= --end, --workers >= 1 and --block >= 1", file=sys.stderr)
        return 2
    settings = gtm.Settings()
    base = Path(tempfile.mkdtemp(prefix="fsmatrix-side-by-side-", dir=args.dir))
    try:
        asked = Threen1Input(args.start, args.end, args.workers, args.block)
        published = run_published(program, asked, settings, base / "published")
        ours = run_ours(asked, "spelled", settings, base / "fsmatrix")
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    rows = compare(ours, published)
    prov = provenance.collect()
    print(
        f"3n+1 {args.start:,}..{args.end:,}, {args.workers} workers, block {args.block:,}, spelled keys; "
        f"GT.M {settings.block_size}-byte blocks, {settings.global_buffers:,} global buffers, "
        f"{settings.journal}-image journaling; {datetime.now(UTC):%Y-%m-%d}, {prov['cpu_model']} × "
        f"{prov['cpu_count']}, kernel {platform.release()}, git {prov['git']['sha'][:10]}\n"
    )
    print(table(rows))
    return 0 if all(r.ok is not False for r in rows) else 1


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.threen1_side_by_side")
