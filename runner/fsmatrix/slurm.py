"""Slurm as a second engine: a matrix's shards as one job array, merged and reported like CI's.

``fsmatrix run FILE --executor slurm --shared DIR`` expands the matrix here, splits the selected
cells into shards (``matrix.shards``, as ``matrix expand --format github`` does), and submits one
``sbatch`` job array: one task per shard, each on a whole node (``--exclusive``: nothing else runs
beside a measurement), asking for the ``kvm`` generic resource when the backend runs guests under
KVM (``--kvm-gres``; a cluster without that GRES gives ``--kvm-gres none``). Each task runs
``fsmatrix run`` on its shard's cells into a results root of its own under the shared directory::

    DIR/<run-id>/submission.json     what was submitted: job id, shards, backend, repeats, results root
    DIR/<run-id>/matrix.yaml         the matrix file, as the tasks read it
    DIR/<run-id>/matrix.json         the expanded matrix (every selected cell, baselines)
    DIR/<run-id>/job.sh              the array's batch script
    DIR/<run-id>/shard-<N>/          task N's results root, and its exit-status when it finished
    DIR/<run-id>/logs/shard-<N>.out  task N's output

When every task has left the queue, the shards are merged into the results root (``store.merge``,
as the GitHub workflow's merge job does) and the report is written (``markdown.write_report``). The
submitting command waits with a progress bar (runs done / total), or returns at once with
``--detach``: ``fsmatrix slurm status DIR/<run-id>`` and ``fsmatrix slurm collect DIR/<run-id>``
then. Submitting the same run id again resumes: each task's ``fsmatrix run`` keeps what completed.

The nodes need fsmatrix at the same path as here (the tasks run this Python, with this environment:
sbatch exports it), and the shared directory at the same path.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fsmatrix import runs
from fsmatrix.agent import jsonfile
from fsmatrix.backends import BACKENDS
from fsmatrix.errors import UserError
from fsmatrix.matrix import Matrix, MatrixCell, shards
from fsmatrix.results import store

if TYPE_CHECKING:
    from fsmatrix.results.verdict import answer

# The report's modules (results.render, .verdict) import scipy and matplotlib, a second of start-up:
# imported where a report is written, so `fsmatrix run` refuses a bad matrix at once.

COMMANDS = ("sbatch", "squeue", "scancel")  # what submitting, waiting and cancelling take
SUBMISSION = "submission.json"
EXIT_STATUS = "exit-status"  # a task's `fsmatrix run` exit status, written when it ends
SUBMISSION_FORMAT = 1
DEFAULT_KVM_GRES = "kvm"
NO_GRES = "none"
POLL_S = 2.0
# squeue's states of a task that has not ended yet (any other state, or none at all: it ended).
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "STOPPED")


@dataclass
class Submission:
    """A submitted (or about to be) job array, as ``submission.json`` keeps it."""

    directory: Path
    run_id: str
    title: str
    backend: str
    repeat: int
    shards: list[list[str]]  # the cell ids of each array task
    results_root: str  # where collect merges to (absolute)
    job_id: str | None = None
    sbatch: list[str] = field(default_factory=list)  # the submitting command line
    replace: bool = False  # --force: the results root's runs of these cells are replaced by the new ones
    format_version: int = SUBMISSION_FORMAT

    @property
    def total_runs(self) -> int:
        return sum(len(s) for s in self.shards) * self.repeat

    def shard_dir(self, index: int) -> Path:
        return self.directory / f"shard-{index}"

    def save(self) -> None:
        doc = {**asdict(self), "directory": str(self.directory)}
        jsonfile.write_atomic(self.directory / SUBMISSION, doc)

    @classmethod
    def load(cls, directory: Path) -> Submission:
        path = directory / SUBMISSION
        try:
            doc = jsonfile.read(path)
        except (OSError, ValueError) as exc:
            raise UserError(f"{directory}: not a Slurm submission of fsmatrix (no readable {SUBMISSION})") from exc
        if not isinstance(doc, dict) or doc.get("format_version") != SUBMISSION_FORMAT:
            raise UserError(f"{path}: not a submission this fsmatrix reads (format {SUBMISSION_FORMAT})")
        doc["directory"] = directory
        return cls(**{k: v for k, v in doc.items() if k in cls.__dataclass_fields__})


def check_installed() -> None:
    """Refuse (one line) when Slurm's client commands are not here."""
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise UserError(
            f"--executor slurm: {', '.join(missing)} not found on PATH; install Slurm's client commands "
            "(Debian: slurm-client) and point them at the cluster (SLURM_CONF or /etc/slurm/slurm.conf)"
        )


def gres_for(backend: str, kvm_gres: str) -> str | None:
    """The generic resource the tasks ask for: ``kvm_gres`` when the backend runs guests (which use
    /dev/kvm when it works), none for the host backend or with ``--kvm-gres none``."""
    if not BACKENDS[backend].uses_kvm or kvm_gres in ("", NO_GRES):
        return None
    return kvm_gres


def batch_script(sub: Submission, task_args: Sequence[str], python: str = sys.executable) -> str:
    """The array's batch script: task N runs ``fsmatrix run`` on shard N's cells into its own results
    root, then records its exit status (a task killed before that has none: collect says so)."""
    cells = " ".join(shlex.quote(",".join(s)) for s in sub.shards)
    base = [python, "-m", "fsmatrix", "run", str(sub.directory / "matrix.yaml"), *task_args]
    command = " ".join(shlex.quote(a) for a in base)
    return f"""#!/bin/bash
# Written by fsmatrix (slurm.py) for run {sub.run_id}: one array task per shard.
set -u
shards=({cells})
n=${{SLURM_ARRAY_TASK_ID:?not run as an array task}}
out={shlex.quote(str(sub.directory))}/shard-$n
mkdir -p "$out"
rm -f "$out/{EXIT_STATUS}"
status=0
{command} --only "${{shards[$n]}}" --results "$out" --run-id {shlex.quote(sub.run_id)} || status=$?
echo "$status" > "$out/{EXIT_STATUS}"
exit "$status"
"""


def sbatch_command(sub: Submission, gres: str | None, extra: Sequence[str]) -> list[str]:
    """The sbatch command line that submits ``sub``'s array (``extra``: the user's own options)."""
    command = [
        "sbatch",
        "--parsable",
        f"--job-name=fsmatrix-{sub.run_id}",
        f"--array=0-{len(sub.shards) - 1}",
        "--exclusive",
        "--nodes=1",
        "--ntasks=1",
        f"--output={sub.directory / 'logs' / 'shard-%a.out'}",
        f"--chdir={sub.directory}",
    ]
    if gres:
        command.append(f"--gres={gres}")
    return [*command, *extra, str(sub.directory / "job.sh")]


@dataclass(frozen=True, kw_only=True)
class SlurmRequest:
    """What ``fsmatrix run --slurm`` asks for: ``cells`` of ``matrix`` run as ``run_id`` on
    ``backend``, ``repeat`` times each, in shards of ``shard_size`` cells (None: the default), from
    the ``shared`` directory into ``results_root``; each task runs with ``task_args``; ``force``
    replaces what an earlier submission of the run id made; ``settings_file``: ``run --settings``."""

    matrix: Matrix
    cells: list[MatrixCell]
    shared: Path
    run_id: str
    backend: str
    repeat: int
    results_root: Path
    shard_size: int | None
    task_args: Sequence[str]
    force: bool
    settings_file: Path | None = None


def prepare(request: SlurmRequest) -> Submission:
    """The submission directory for this run, written (not submitted yet). A run id submitted
    before is resumed when its shards are the same; refused while its job is still queued. A
    ``settings_file`` (``run --settings``) is copied beside the matrix and given to every task."""
    m, cells, run_id, results_root, force = (
        request.matrix,
        request.cells,
        request.run_id,
        request.results_root,
        request.force,
    )
    task_args, repeat, settings_file = request.task_args, request.repeat, request.settings_file
    directory = (request.shared / run_id).resolve()
    split = [[c.id for c in shard] for shard in shards(cells, request.shard_size)]
    held = [c.id for c in cells if any(store.iter_result_files(results_root / run_id / c.id))]
    if held and not force and not (directory / SUBMISSION).exists():
        # Runs made elsewhere (a local run): merging the new ones beside them would refuse at the end.
        raise UserError(
            f"{results_root / run_id} already holds runs of {len(held)} of these cells ({held[0]}, ...) that this "
            f"shared directory did not make: give another --run-id, or --force to replace them"
        )
    if (directory / SUBMISSION).exists():
        old = Submission.load(directory)
        if old.job_id and active_tasks(old.job_id):
            raise UserError(
                f"{directory}: run {run_id} is still queued or running as Slurm job {old.job_id}; "
                f"wait for it (fsmatrix slurm status {directory}) or cancel it (scancel {old.job_id})"
            )
        if old.shards != split and not force:
            raise UserError(
                f"{directory}: run {run_id} was submitted with other shards (other cells or --shard-size); "
                "give another --run-id, or --force to run it again from scratch"
            )
        if force:
            for index in range(len(old.shards)):
                shutil.rmtree(old.shard_dir(index), ignore_errors=True)
    (directory / "logs").mkdir(parents=True, exist_ok=True)
    if Path(m.path).resolve() != directory / "matrix.yaml":
        shutil.copyfile(m.path, directory / "matrix.yaml")
    if settings_file is not None:
        shutil.copyfile(settings_file, directory / "settings.yaml")
        task_args = [*task_args, "--settings", str(directory / "settings.yaml")]
    jsonfile.write_atomic(directory / "matrix.json", runs.matrix_record(m, cells, repeat))
    if m.design is not None:  # every task runs the design chosen here, never one of its own (runs.design_from)
        task_args = [*task_args, "--design-from", str(directory / "matrix.json")]
    sub = Submission(
        directory=directory,
        run_id=run_id,
        title=f"{m.name} ({run_id})",
        backend=request.backend,
        repeat=repeat,
        shards=split,
        results_root=str(results_root.resolve()),
        replace=force,
    )
    script = directory / "job.sh"
    script.write_text(batch_script(sub, task_args), encoding="utf-8")
    script.chmod(0o755)
    return sub


def submit(sub: Submission, gres: str | None, extra: Sequence[str]) -> str:
    """Submit the array; its job id (also saved in ``submission.json``)."""
    command = sbatch_command(sub, gres, extra)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        hint = f" (no such GRES on this cluster? --kvm-gres {NO_GRES} asks for none)" if gres and "gres" in why else ""
        raise UserError(f"sbatch refused the job array: {why}{hint}")
    sub.job_id = done.stdout.strip().split(";")[0]
    sub.sbatch = command
    sub.save()
    return sub.job_id


def active_tasks(job_id: str) -> dict[int, str]:
    """Array task -> state, for the tasks of ``job_id`` that have not ended (squeue)."""
    done = subprocess.run(
        ["squeue", "--noheader", "--array", f"--jobs={job_id}", "--states=all", "--format=%K %T"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:  # "Invalid job id specified": long gone from the controller
        return {}
    states: dict[int, str] = {}
    for line in done.stdout.splitlines():
        task, _, state = line.strip().partition(" ")
        if state not in ACTIVE:
            continue
        for index in _task_ids(task):
            states[index] = state
    return states


def _task_ids(text: str) -> list[int]:
    """Task ids from squeue's %K: "3", "0-4", "[0-4%2]" or "1,3"."""
    ids: list[int] = []
    for part in text.strip("[]").split("%")[0].split(","):
        low, _, high = part.partition("-")
        if low.isdigit():
            ids.extend(range(int(low), int(high or low) + 1) if (high or low).isdigit() else [int(low)])
    return ids


def runs_done(sub: Submission) -> int:
    """Result documents written so far across the shards (any status: a run that ended)."""
    count = 0
    for index, cell_ids in enumerate(sub.shards):
        run_dir = sub.shard_dir(index) / sub.run_id
        for cell_id in cell_ids:
            count += sum(store.result_path(run_dir, cell_id, r).exists() for r in range(1, sub.repeat + 1))
    return count


def task_exit(sub: Submission, index: int) -> int | None:
    """Task ``index``'s exit status, or None when it never recorded one (still running, or killed)."""
    try:
        return int((sub.shard_dir(index) / EXIT_STATUS).read_text().strip())
    except (OSError, ValueError):
        return None


def shard_states(sub: Submission) -> list[str]:
    """Each task in words: "pending", "running", "exit 0", "ended without an exit status" ..."""
    queued = active_tasks(sub.job_id) if sub.job_id else {}
    out = []
    for index in range(len(sub.shards)):
        status = task_exit(sub, index)
        if index in queued:
            out.append(queued[index].lower())
        elif status is not None:
            out.append(f"exit {status}")
        else:
            out.append("ended without an exit status (killed, cancelled or failed to start: see its log)")
    return out


@contextmanager
def cancelled_on_interrupt(sub: Submission, console: Console) -> Iterator[None]:
    """Ctrl-C (or SIGTERM) inside: the job is cancelled, nothing keeps running for a command that is
    gone (``fsmatrix run`` from submitting on; not ``slurm collect --wait``, which only waits)."""
    try:
        yield
    except KeyboardInterrupt:
        if sub.job_id:
            subprocess.run(["scancel", sub.job_id], capture_output=True, timeout=60, check=False)
            console.print(f"cancelled Slurm job {sub.job_id}; the same command again resumes where it stopped")
        raise


def wait(sub: Submission, console: Console, poll_s: float = POLL_S) -> None:
    """Until every task has left the queue, with a progress bar of the runs written so far."""
    assert sub.job_id is not None
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task(f"slurm job {sub.job_id}", total=sub.total_runs)
        shown = ""
        while True:
            queued = active_tasks(sub.job_id)
            done, words = runs_done(sub), _describe(sub.job_id, queued)
            progress.update(bar, completed=done, description=words)
            if not console.is_terminal and f"{words} {done}" != shown:  # a log gets a line per change
                shown = f"{words} {done}"
                progress.console.print(f"[{done}/{sub.total_runs}] {words}", markup=False, highlight=False)
            if not queued:
                break
            time.sleep(poll_s)


def _describe(job_id: str, queued: dict[int, str]) -> str:
    if not queued:
        return f"slurm job {job_id}: done"
    counts: dict[str, int] = {}
    for state in queued.values():
        counts[state.lower()] = counts.get(state.lower(), 0) + 1
    return f"slurm job {job_id}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


@dataclass
class Collected:
    run_dir: Path
    report: Path
    found: answer.Answer
    failed: list[str]  # each task that did not end with exit 0, in words

    @property
    def ok(self) -> bool:
        return not self.failed


def collect(sub: Submission, results_root: Path | None = None, echo: Callable[[str], None] = print) -> Collected:
    """Merge every shard's results into the results root and write the report (UserError while the
    job still has tasks queued or running)."""
    if sub.job_id and (queued := active_tasks(sub.job_id)):
        raise UserError(
            f"Slurm job {sub.job_id} still has {len(queued)} task(s) queued or running; wait for them "
            f"(fsmatrix slurm status {sub.directory})"
        )
    root = results_root or Path(sub.results_root)
    run_dir = root / sub.run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    # The whole matrix's record first: each shard's own matrix.json holds its cells only.
    shutil.copyfile(sub.directory / "matrix.json", run_dir / "matrix.json")
    sources = [sub.shard_dir(i) for i in range(len(sub.shards)) if sub.shard_dir(i).is_dir()]
    failed = []
    for index, state in enumerate(shard_states(sub)):
        if state != "exit 0":
            failed.append(f"shard {index} ({sub.directory / 'logs' / f'shard-{index}.out'}): {state}")
    if not sources:
        raise UserError(f"{sub.directory}: no task wrote any result ({'; '.join(failed)})")
    if sub.replace:  # --force: what the results root held of these cells gives way, as a local --force overwrites
        for cell_id in {c for shard in sub.shards for c in shard}:
            shutil.rmtree(run_dir / cell_id, ignore_errors=True)
    copied, same = store.merge(sources, root)
    echo(f"merged {copied} result documents into {root} ({same} already there)")
    from fsmatrix.results.render import markdown

    path, found = markdown.write_report(run_dir, sub.title)
    return Collected(run_dir=run_dir, report=path, found=found, failed=failed)


def finish(done: Collected, echo: Callable[[str], None]) -> int:
    """The end of a run's output, as the local executor prints it: the failed tasks, the answer's
    first lines, the report's path last; the exit status (0 only when every task ended with 0)."""
    from fsmatrix.results.render import answer_text

    for line in done.failed:
        echo(f"slurm: {line}")
    for line in answer_text.summary_lines(done.found):
        echo(line)
    echo(f"report: {done.report.resolve()}")
    return 0 if done.ok else 1


def describe_submission(sub: Submission) -> list[str]:
    """``fsmatrix slurm status``: the job, each task and the runs written."""
    lines = [
        f"run {sub.run_id}: Slurm job {sub.job_id or '(not submitted)'}, {len(sub.shards)} tasks, "
        f"{runs_done(sub)}/{sub.total_runs} runs written, results to {sub.results_root}"
    ]
    for index, state in enumerate(shard_states(sub)):
        lines.append(f"  shard {index} ({len(sub.shards[index])} cells): {state}")
    return lines
