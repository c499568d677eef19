"""The checks of a run: the reference answer (``expected``), the seeded sample of stored ``^step``
entries, the TP transactions against GT.M's counters (``verify``)."""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Mapping
from typing import Any

from fsmatrix.agent import proc
from fsmatrix.agent.databases import gtm
from fsmatrix.agent.workloads.threen1 import memory as threen1_memory
from fsmatrix.agent.workloads.threen1 import reference as threen1_reference
from fsmatrix.agent.workloads.threen1.params import WORDS_FILE, Params
from fsmatrix.agent.workloads.threen1.parse import RunOutput

# Starting numbers whose stored ^step entry is checked after every run (all when the range is
# smaller), each with one more entry from its sequence.
SAMPLE_SIZE = 1000
SAMPLE_TIMEOUT = 300.0
# How far GT.M's read-only TP count (TTR) may fall from the workers' own count (see verify).
TTR_SLACK = 10
TTR_SLACK_FRACTION = 0.001


def expected(params: Params) -> dict[str, Any]:
    """The reference answer for the range: the published table, else the cache, else computed
    (1..40,000,000 takes minutes). The Workload's ``reference``: computed before the timed run, on
    the host for the VM backends, and handed to ``run`` in ``Workspace.reference``."""
    t0 = time.monotonic()
    longest, largest, source, cache = threen1_reference.lookup(params.start, params.end)
    return {
        "start": params.start,
        "end": params.end,
        "longest_sequence": longest,
        "largest_number": largest,
        "source": source,
        "cache": cache,
        "seconds": round(time.monotonic() - t0, 3),
    }


def sample_entries(params: Params, seed: int) -> list[tuple[int, int]]:
    """(number, expected sequence length) for a seeded random sample of what a run must have stored.

    ``SAMPLE_SIZE`` starting numbers of the range (all of them in a smaller range) and, for each,
    one random number of its sequence (most lie beyond the range): every number on the way from a
    starting number to 1 gets a ^step entry. The lengths come from a plain iteration
    (``threen1_reference.sequence_length``), independent of the M routine and of its database.
    """
    rng = random.Random(seed)
    starts = rng.sample(range(params.start, params.end + 1), min(SAMPLE_SIZE, params.count))
    entries: dict[int, int] = {}
    for n in starts:
        steps, path = threen1_reference.sequence_length(n)
        entries[n] = steps
        if path:
            k = rng.randrange(len(path))
            entries.setdefault(path[k], steps - k)
    return list(entries.items())


def read_steps(db: gtm.Database, keys: str, numbers: list[int], timeout: float) -> list[int | None]:
    """The sequence lengths stored in ^step for ``numbers`` (None: no entry, -1: unreadable value).

    The subscripts are spelled here, in Python, and the values read back here: the check does not
    go through the routine's own conversions.
    """
    words = threen1_memory.load_digit_words(WORDS_FILE)
    table = threen1_memory.spelling_table(words)
    digits = {w: str(d) for d, w in enumerate(words)}
    lines = [threen1_memory.spell(n, table) if keys == "spelled" else str(n) for n in numbers]
    cmd = [db.tool("mumps"), "-run", "peek^threen1"]
    try:  # bytes in and out: the digit words are UTF-8 whatever the locale says
        out = subprocess.run(
            cmd, input="".join(f"{line}\n" for line in lines).encode(), capture_output=True, env=db.env(),
            timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise proc.CommandError(cmd, None, "reading the ^step sample") from exc
    text = out.stdout.decode("utf-8", errors="replace")
    replies = text.splitlines()
    if out.returncode != 0 or len(replies) != len(numbers):
        raise proc.CommandError(cmd, out.returncode, text + out.stderr.decode(errors="replace"))
    values: list[int | None] = []
    for reply in replies:
        present, _, value = reply.partition(" ")
        if present != "1":
            values.append(None)
            continue
        try:
            values.append(threen1_memory.unspell(value, digits) if keys == "spelled" else int(value))
        except (KeyError, ValueError):
            values.append(-1)
    return values


def check_sample(entries: list[tuple[int, int]], stored: list[int | None], seed: int) -> dict[str, Any]:
    """The sample's record for the verification: seed, size, what was wrong (first few)."""
    wrong = [
        {"number": n, "expected": want, "stored": got}
        for (n, want), got in zip(entries, stored, strict=True)
        if got != want
    ]
    return {
        "seed": seed,
        "size": len(entries),
        "method": f"{SAMPLE_SIZE} starting numbers (all if fewer) and one number of each one's sequence",
        "missing": sum(1 for w in wrong if w["stored"] is None),
        "wrong": sum(1 for w in wrong if w["stored"] is not None),
        "examples": wrong[:5],
    }


def transactions(run: RunOutput) -> dict[str, int]:
    """The TP transactions the workers counted: one per computed sequence, one per worker at its end."""
    per_sequence = sum(w.tp for w in run.workers)
    set_result = sum(w.tp_result for w in run.workers)
    read_write = sum(w.tp_rw for w in run.workers)
    final = len(run.workers)  # each adds to ^reads/^updates: always read-write
    return {
        "per_sequence": per_sequence,
        "final": final,
        "read_only": per_sequence - read_write,
        "read_write": read_write + final,
        "read_write_result": set_result,  # what the published program's read-write ones are, with `final`
        # the departure's extra read-write transactions: ^highest set, ^result not
        "read_write_highest_only": read_write - set_result,
    }


def verify(
    params: Params,
    run: RunOutput,
    reference: Mapping[str, Any],
    counters: Mapping[str, int],
    sample: Mapping[str, Any],
    *,
    resumed: bool = False,
) -> dict[str, Any]:
    """Every check of a run; any problem fails it.

    Every starting number ends with exactly one read that finds a length, and every other read is
    followed by one update, so reads - updates == end - start + 1 whatever the number of workers.
    ``resumed``: a run that went on from a recovered database; its workers saw only the sequences
    they computed, so ^result / ^highest are not compared with their own answers (the reference is).
    """
    longest, largest, source = reference["longest_sequence"], reference["largest_number"], reference["source"]
    shared = run.shared
    pids = {w.pid for w in run.workers}
    tx = transactions(run)
    committed = counters.get("TTR", 0) + counters.get("TTW", 0)
    got = {
        "longest_sequence": shared.longest,
        "largest_number": shared.largest,
        "reads_minus_updates": shared.reads - shared.updates,
        "workers": len(run.workers),
        "distinct_worker_pids": len(pids),
        "gtm_tp_committed": committed,
        "gtm_tp_read_write": counters.get("TTW", 0),
    }
    problems = []
    if shared.longest != longest:
        problems.append(f"longest sequence {shared.longest}, the {source} reference says {longest}")
    if shared.largest != largest:
        problems.append(f"largest number {shared.largest}, the {source} reference says {largest}")
    ours = (run.reads, run.updates, run.longest, run.largest)
    theirs = (shared.reads, shared.updates, shared.longest, shared.largest)
    if (theirs[:2] if resumed else theirs) != (ours[:2] if resumed else ours):
        problems.append(
            "the database's ^reads, ^updates, ^result, ^highest "
            f"({shared.reads}, {shared.updates}, {shared.longest}, {shared.largest}) differ from the "
            f"workers' own counts {ours}"
        )
    if shared.reads - shared.updates != params.count:
        problems.append(f"reads - updates = {shared.reads - shared.updates}, expected {params.count}")
    if len(run.workers) != params.workers or len(pids) != params.workers:
        problems.append(f"{len(run.workers)} workers reported ({len(pids)} distinct PIDs), asked {params.workers}")
    # GT.M counts every committed TP transaction, read-only (TTR) or read-write (TTW): the workers'
    # own counts must match, or something else ran transactions (or these did not commit). TTW is
    # counted under the database's critical section and is exact; TTR is not (read-only commits
    # take no lock) and comes out a few short with several workers: 0-2 of 43,000 measured.
    ttr, read_only = counters.get("TTR", 0), tx["read_only"]
    if abs(ttr - read_only) > max(TTR_SLACK, TTR_SLACK_FRACTION * read_only):
        problems.append(f"GT.M counted {ttr} read-only TP transactions, the workers {read_only}")
    if counters.get("TTW", 0) != tx["read_write"]:
        problems.append(
            f"GT.M counted {counters.get('TTW', 0)} read-write TP transactions, the workers {tx['read_write']}"
        )
    if sample["missing"] or sample["wrong"]:
        problems.append(
            f"{sample['missing']} missing and {sample['wrong']} wrong of {sample['size']} sampled ^step entries "
            f"(seed {sample['seed']}), e.g. {sample['examples'][0]}"
        )
    return {
        "status": "failed" if problems else "passed",
        "reference": {**reference, "numbers": params.count},
        "got": got,
        "sample": dict(sample),
        "message": "; ".join(problems)
        if problems
        else (
            f"longest {longest} and largest {largest} match the {source} reference; "
            f"{sample['size']} sampled ^step entries right; TP transactions as counted"
        ),
    }
