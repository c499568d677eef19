"""After a crash: the database recovered as its journaling allows, checked (``mupip integ``, the work
that survived: ``survey``), the range resumed and verified (``recover``, the crash hook)."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fsmatrix.agent import crash, proc
from fsmatrix.agent.cell import Cell
from fsmatrix.agent.contract import Outcome, Workspace
from fsmatrix.agent.databases import gtm
from fsmatrix.agent.workloads.threen1.params import DB_NAME, ROUTINE, SETUP_TIMEOUT, WORDS_FILE, Params, time_left
from fsmatrix.agent.workloads.threen1.parse import line_fields
from fsmatrix.agent.workloads.threen1.run import run
from fsmatrix.agent.workloads.threen1.verify import SAMPLE_TIMEOUT


@dataclass(frozen=True)
class Survey:
    """What a database holds before a resume (``survey^threen1``)."""

    entries: int  # ^step entries
    started: int  # starting numbers of the range that have one: work that is not done again
    result: int
    highest: int


def survey(db: gtm.Database, params: Params, timeout: float = SAMPLE_TIMEOUT) -> Survey:
    """Count what the database holds for the range, reading only (``survey^threen1``)."""
    cmd = [db.tool("mumps"), "-run", "survey^threen1", str(params.start), str(params.end), params.keys]
    out = proc.run(cmd, env=db.env({"threen1_words": str(WORDS_FILE)}), input="", timeout=timeout, check=False)
    line = next((x for x in out.stdout.splitlines() if x.startswith("survey ")), None)
    if out.returncode != 0 or line is None:
        raise proc.CommandError(cmd, out.returncode, out.stdout + out.stderr)
    f = line_fields(line)
    return Survey(entries=f["entries"], started=f["started"], result=f["result"], highest=f["highest"])


def recover(cell: Cell, ws: Workspace, event: crash.CrashEvent) -> Outcome:
    """The crash hook: recover the crashed database in ``ws``, check it, resume the range, verify.

    - journal ``before``: the killed processes' shared memory discarded unflushed (what a power cut
      leaves; recovering with it attached sometimes trips a GT.M assertion), then
      ``mupip journal -recover -backward``;
    - ``nobefore``: the killed processes' shared memory discarded unflushed, the copy taken when
      the database was created put back, ``mupip journal -recover -forward`` onto it, journaling on
      again;
    - ``off``: nothing to recover from: recovery is recorded as not attempted and the database run
      down (``mupip rundown`` writes out what the killed processes left in shared memory; when it
      cannot, that failure is recorded and the shared memory discarded); integ and the resume
      still run, and judge it.

    Then ``mupip integ`` must be clean, the database must hold at least one block's worth of the
    range's starting numbers (work the resume reuses), and the resumed run must end with the
    reference answers (its usual verification).
    """
    params, settings = cell.typed_params(Params), cell.settings_of(gtm.Settings)
    deadline = time.monotonic() + cell.timeout
    ws.scratch.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="threen1-recover-", dir=ws.scratch)).resolve()
    db = gtm.attach_database(settings, gtm.DatabaseLocation(ws.data, ws.journal, scratch / "gtm", DB_NAME))

    def left() -> float:
        return time_left(deadline, cell.timeout)

    try:
        gtm.compile_routine(db, ROUTINE, timeout=SETUP_TIMEOUT)  # survey^threen1 (touches no database)
        _recover_journal(db, settings, event, left)
        _check(db, params, event, left)
    except BaseException:
        gtm.abandon(db)  # unmountable, and no shared memory left behind
        raise
    resumed_ws = dataclasses.replace(ws, measure=contextlib.nullcontext, crash=None)  # the resume is not crashed
    with event.step("resume") as step:
        outcome = run(params, settings, resumed_ws, left(), resume=True)
        step["detail"] = f"{outcome.metrics['updates']} updates to finish the range"
    event.reused["resume_updates"] = outcome.metrics["updates"]
    outcome.metrics["recovery_s"] = event.recovery_s or 0.0
    outcome.details["recovery"] = {"scratch": str(scratch), "reused": dict(event.reused)}
    return outcome


def _recover_journal(
    db: gtm.Database, settings: gtm.Settings, event: crash.CrashEvent, left: Callable[[], float]
) -> None:
    """The recovery the journal setting allows (``recover``'s list), each part a step of ``event``."""
    if settings.journal == "before":
        # Unflushed, as a power cut would lose it: GT.M V7.0-005's backward recovery sometimes
        # asserts (GTMASSERT2, wcs_recover.c) or waits a minute on a dead process's shared memory.
        with event.step("discard shared memory") as step:
            step["detail"] = ", ".join(gtm.discard_ipc(db)) or "none left"
        with event.step("mupip journal -recover -backward", recovery=True) as step:
            said = gtm.journal_recover(db, "backward", timeout=left())
            step["detail"] = _journal_said(said)
    elif settings.journal == "nobefore":
        with event.step("discard shared memory") as step:
            step["detail"] = ", ".join(gtm.discard_ipc(db)) or "none left"
        with event.step("restore the backup taken at creation") as step:
            gtm.restore_backup(db)
        with event.step("mupip journal -recover -forward", recovery=True) as step:
            said = gtm.journal_recover(db, "forward", timeout=left())
            step["detail"] = _journal_said(said)
        with event.step("journaling on again"):
            gtm.enable_journal(db)
    else:
        event.not_attempted("journal recovery", "gtm.journal is off: GT.M has no journal to recover from")
        # What GT.M asks for after an abnormal end without a journal: a rundown, which writes out
        # the global buffers the killed processes left in shared memory (after a power cut
        # there are none: they were lost with the machine).
        try:
            with event.step("mupip rundown") as step:
                step["detail"] = _last_lines(gtm.rundown(db), 2)
        except crash.RecoveryFailed:
            # A process killed inside GT.M's critical section can leave buffers a rundown
            # refuses (GTMASSERT2 in wcs_recover): the failed step stays on record, the buffers
            # are dropped, and integ and the resume still say what is left.
            with event.step("discard shared memory and run down") as step:
                step["detail"] = ", ".join(gtm.discard_ipc(db)) or "none left"
                gtm.rundown(db)


def _check(db: gtm.Database, params: Params, event: crash.CrashEvent, left: Callable[[], float]) -> None:
    """``mupip integ`` must be clean, and the database must hold at least one block's worth of the
    range's starting numbers (``event.reused``: the work the resume reuses)."""
    with event.step("mupip integ") as step:
        clean, said = gtm.integ(db, timeout=left())
        step["detail"] = said
    event.check("mupip integ", clean, said if clean else f"the recovered database is damaged: {said}")
    needed = min(params.block, params.count)
    try:  # a damaged database may not even be readable: a finding, and the resume is still tried
        with event.step("survey"):
            found = survey(db, params, timeout=left())
    except crash.RecoveryFailed as exc:
        event.check("work reused", False, f"the database cannot be read: {exc}")
    else:
        event.reused = {
            "step_entries": found.entries,
            "starting_numbers_done": found.started,
            "starting_numbers": params.count,
            "result_before_resume": found.result,
            "highest_before_resume": found.highest,
        }
        event.check(
            "work reused",
            found.started >= needed,
            f"{found.started} of {params.count} starting numbers survived the crash"
            + ("" if found.started >= needed else f", fewer than one block ({needed}): the crash lost the work"),
        )


def _last_lines(text: str, count: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-count:])


def _journal_said(text: str) -> str:
    """What mupip journal -recover reported: its phases with their times, and every warning or error."""
    keep = [line.strip() for line in text.splitlines() if re.search(r"%GTM-(I-MUJNLSTAT|I-SHMREMOVED|[WEFS]-)", line)]
    return " | ".join(keep)
