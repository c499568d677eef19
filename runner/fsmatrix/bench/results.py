"""The results code before and after a commit: loading documents and writing a report.
``python -m fsmatrix.bench.results [--against COMMIT] [--documents N] [--cells C] [--repeat R] [--format md|json]``

Two measurements, each timed for the code of this tree ("after") and for the code of ``--against``
(default 05146a4, the last commit before the results code became store/verdict/render; "before"):

- **load**: ``load_results(ROOT)`` of a temporary results root holding ``--documents`` (default
  10000) result documents: copies of the real host-backend documents stored under
  tests/data/goldens/ (pgbench/pgbench/ and threen1/threen1/), each under a new run id, cell id and
  repeat and otherwise as stored (``samples.series`` included). Before: the raw dicts; after: typed
  ``store.Result`` objects.
- **report**: what ``fsmatrix report`` does for a run of ``--cells`` (default 100) cells × 3 repeats:
  load the run directory, build the answer from it and its ``matrix.json``, write the Markdown
  report and the answer's JSON. The cells are made from the same real documents: 10 storage
  configurations (ext4, xfs and btrfs, with mount options) per comparison group, the groups pgbench
  and 3n+1 at several client and worker counts, ids, groups and baselines as ``fsmatrix matrix
  expand`` writes them; a configuration's metrics are the real run's scaled by 1 + 2 % × its
  index in the group, so that a group has winners and ties as a real one does.

Each side runs in a process of its own, started once with ``PYTHONPATH`` on its tree's ``runner/``
(before: the commit's ``runner/`` from ``git archive``, in a temporary directory) and the running
interpreter; the import and one untimed report (the first call's lazy imports) come first. The
repetitions (``--repeat``, default 5) then alternate between the two processes, the side that goes
first swapping every repetition, so that a busy spell of a shared machine falls on both. Only the
measured call is timed (``time.perf_counter``); the files are written once, before, and read from
the page cache by both. The report is the slow one: on a 2-core machine a 20-cell run's took about
30 s a call (the answer's repeat advice, verdict/power.py, most of it), a 100-cell run's more than
3 minutes, so the defaults take most of an hour there; ``--cells 20`` about 7 minutes.

Prints Markdown (or ``--format json``): per measurement the repetitions, the median and min..max
seconds of each side and the ratio after/before (of the medians; min..max of the repetitions'
pairs), with the date, both commits and the load average before and after. Needs no root; the
temporary directory goes on every way out. A bad option or an ``--against`` that is not a commit
stops it with one line (exit status 2).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from fsmatrix.errors import UserError, exit_with, interrupt_on_sigterm

# The imports of this tree's fsmatrix beyond errors (matrix, agent) are made inside the functions that
# prepare the files: a worker process runs this file against the *other* commit's fsmatrix too, which
# reaches its results code only through ``measure_load`` and ``measure_report``.

REPO = Path(__file__).resolve().parents[3]
RUNNER = REPO / "runner"
GOLDENS = REPO / "tests" / "data" / "goldens"
TEMPLATE_RUNS = ("pgbench/pgbench", "threen1/threen1")  # real host-backend runs, 3 cells × 3 repeats each
AGAINST = "05146a4"  # before the results code became store/verdict/render
DOCUMENTS = 10000
CELLS = 100
REPEATS = 3  # a cell's runs in the report's run
REPEAT = 5
RUN_CELLS = 100  # cells a run holds in the load measurement's results root
STORAGE = (  # a comparison group's configurations
    ("ext4", ""),
    ("ext4", "noatime"),
    ("ext4", "data=writeback"),
    ("ext4", "data=journal"),
    ("xfs", ""),
    ("xfs", "noatime"),
    ("xfs", "logbsize=256k"),
    ("btrfs", ""),
    ("btrfs", "noatime"),
    ("btrfs", "compress=zstd"),
)
SCALE_STEP = 0.02  # a configuration's metrics: the real run's × (1 + SCALE_STEP × its index)
WORKLOAD_KNOB = {"pgbench": "clients", "threen1": "workers"}  # what varies between groups: 2, 4, 8, ...

SIDES = ("before", "after")
KINDS = ("load", "report")


# ----------------------------------------------------------------------------------- measuring
# API-neutral: run in a worker against either commit's fsmatrix (``fsmatrix.results.store`` or the
# flat modules before it), and in this process by the smoke test.


def _new_api() -> bool:
    return importlib.util.find_spec("fsmatrix.results.store") is not None


def measure_load(root: Path) -> tuple[float, str]:
    """Seconds to load (and, after, type) every result document under ``root``, and what was loaded."""
    if _new_api():
        load = importlib.import_module("fsmatrix.results.store").load_results
    else:
        load = importlib.import_module("fsmatrix.results").load_results
    start = time.perf_counter()
    docs = load(root)
    seconds = time.perf_counter() - start
    return seconds, f"{len(docs)} documents, {type(docs[0]).__name__}"


def measure_report(run_dir: Path) -> tuple[float, str]:
    """Seconds for ``fsmatrix report``'s work on ``run_dir``: load, the answer, the Markdown report and
    the answer's JSON; and the size of what was written."""
    title = run_dir.name
    if _new_api():
        store = importlib.import_module("fsmatrix.results.store")
        environment = importlib.import_module("fsmatrix.results.verdict.environment")
        answering = importlib.import_module("fsmatrix.results.verdict.answering")
        markdown = importlib.import_module("fsmatrix.results.render.markdown")
        answer_text = importlib.import_module("fsmatrix.results.render.answer_text")
        # Each call as a fresh `fsmatrix report` process: no repeat advice kept from the call before.
        power = importlib.import_module("fsmatrix.results.verdict.power")
        for cached in ("power", "settle_probability"):  # the repeat advice's cache, before and after issue 37
            if hasattr(power, cached):
                getattr(power, cached).cache_clear()
        start = time.perf_counter()
        if importlib.util.find_spec("fsmatrix.results.verdict.report") is not None:  # one entry point (issue 46)
            assemble = importlib.import_module("fsmatrix.results.verdict.report")
            if hasattr(assemble, "of_run"):  # the store reads, the verdict decides (issue 49)
                made = assemble.of_run(store.load_run_records(run_dir))
            else:
                made = assemble.report(run_dir)
            found, md = made.answer, markdown.markdown(made, title)
        else:
            seen = environment.with_environment_axes(store.load_results(run_dir))
            found = answering.build(seen, store.load_matrix_json(run_dir))
            md = markdown.markdown(seen, title, found)
        js = json.dumps({"title": title, "answer": answer_text.to_json(found)}, indent=1, ensure_ascii=False)
    else:
        results = importlib.import_module("fsmatrix.results")
        answer = importlib.import_module("fsmatrix.results.answer")
        report = importlib.import_module("fsmatrix.results.report")
        start = time.perf_counter()
        docs = results.load_results(run_dir)
        found = answer.build(docs, results.load_matrix_json(run_dir))
        md = report.markdown(docs, title, found)
        js = json.dumps({"title": title, "answer": answer.to_json(found)}, indent=1, ensure_ascii=False)
    seconds = time.perf_counter() - start
    return seconds, f"{len(found.groups)} groups; Markdown {len(md)} characters, JSON {len(js)}"


MEASURE: dict[str, Callable[[Path], tuple[float, str]]] = {"load": measure_load, "report": measure_report}


def serve(requests: IO[str] = sys.stdin, replies: IO[str] = sys.stdout) -> None:
    """A worker: for each line ``KIND<TAB>PATH``, one JSON line back: ``[seconds, what]`` or ``{"error"}``.
    Whatever the measured code prints goes to stderr, off the replies."""
    sys.stdout = sys.stderr
    for line in requests:
        kind, path = line.rstrip("\n").split("\t")
        try:
            reply: Any = MEASURE[kind](Path(path))
        except Exception as exc:  # told to the parent, which stops with it
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


# A worker runs this very file (not the module: the other commit has none) with the other tree's
# fsmatrix first on the path; run_path adds nothing to the path for a file.
WORKER = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='fsmatrix_bench_results_worker')['serve']()"

Side = Callable[[str, Path], tuple[float, str]]


def in_process(kind: str, path: Path) -> tuple[float, str]:
    """A side measured in this process, with the fsmatrix it imports (the smoke test's)."""
    return MEASURE[kind](path)


class Worker:
    """One side's process: started with ``runner`` (a tree's ``runner/``) as its only ``PYTHONPATH``."""

    def __init__(self, runner: Path, cwd: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(runner)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
        )
        self.runner = runner

    def __call__(self, kind: str, path: Path) -> tuple[float, str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{kind}\t{path}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker on {self.runner} ended (exit status {self.proc.wait()})")
        reply = json.loads(line)
        if isinstance(reply, dict):
            raise RuntimeError(f"{kind} with the code in {self.runner}: {reply['error']}")
        return float(reply[0]), str(reply[1])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def worker(runner: Path, cwd: Path) -> Iterator[Worker]:
    w = Worker(runner, cwd)
    try:
        yield w
    finally:
        w.close()


# ----------------------------------------------------------------------------------- the documents


@dataclass(frozen=True)
class Template:
    """A real cell: its parameters and its documents, by repeat."""

    workload: str
    params: Mapping[str, Any]
    docs: Sequence[Mapping[str, Any]]


def templates(goldens: Path = GOLDENS) -> list[Template]:
    """The real cells the documents are made from; UserError when they are not there."""
    found = []
    for run in TEMPLATE_RUNS:
        by_cell: dict[str, list[dict[str, Any]]] = {}
        for path in sorted((goldens / run).glob("*/r*.json")):
            doc = json.loads(path.read_text(encoding="utf-8"))
            by_cell.setdefault(doc["cell_id"], []).append(doc)
        for docs in by_cell.values():
            docs.sort(key=lambda d: d["repeat"])
            if len(docs) >= REPEATS:
                found.append(Template(docs[0]["workload"], docs[0]["params"], docs[:REPEATS]))
    if not found:
        raise UserError(f"{goldens}: no stored runs under {', '.join(TEMPLATE_RUNS)} to make documents from")
    return found


def _write(path: Path, made: Mapping[str, Any]) -> None:
    """A document this benchmark made, written as the agent writes one (raw JSON: a writer, not a reader)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(made, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def made_document(i: int, made_from: Sequence[Template], cells_per_run: int = RUN_CELLS) -> dict[str, Any]:
    """Document ``i`` of a benchmark's many: runs of ``cells_per_run`` cells × ``REPEATS``, each cell a
    copy of a real one with a new cell id, each document its real counterpart's with a new run id,
    cell id and repeat."""
    cell, repeat = divmod(i, REPEATS)
    t = made_from[cell % len(made_from)]
    return dict(t.docs[repeat]) | {
        "cell_id": f"{t.docs[0]['cell_id']}-{cell:06d}",
        "repeat": repeat + 1,
        "run_id": f"bench-{cell // cells_per_run:04d}",
    }


def write_results_root(root: Path, documents: int, made_from: Sequence[Template]) -> None:
    """``documents`` result documents (``made_document``) under ``root``."""
    for i in range(documents):
        doc = made_document(i, made_from)
        _write(root / doc["run_id"] / doc["cell_id"] / f"r{doc['repeat']}.json", doc)


def _scaled(metrics: Mapping[str, Any], factor: float) -> dict[str, Any]:
    return {k: v * factor if isinstance(v, int | float) and not isinstance(v, bool) else v for k, v in metrics.items()}


def cell_params(index: int, made_from: Sequence[Template]) -> tuple[dict[str, Any], Template, int]:
    """The parameters of the report run's cell ``index``, the real cell its documents copy, and its
    configuration's index in its group: group ``index // 10`` (pgbench, 3n+1, pgbench, ... at 2, 4, 8,
    ... clients or workers), configuration ``index % 10`` of ``STORAGE``."""
    group, config = divmod(index, len(STORAGE))
    workloads = sorted({t.workload for t in made_from})
    workload = workloads[group % len(workloads)]
    filesystem, mount_options = STORAGE[config]
    own = [t for t in made_from if t.workload == workload]
    t = next((t for t in own if t.params.get("filesystem") == filesystem), own[0])
    params = copy.deepcopy(dict(t.params)) | {"filesystem": filesystem, "mount_options": mount_options}
    knob = WORKLOAD_KNOB.get(workload)
    if knob is not None:
        params["workload"][workload][knob] = 2 ** (1 + group // len(workloads))
    return params, t, config


def write_run_dir(run_dir: Path, cells: int, made_from: Sequence[Template]) -> None:
    """A run of ``cells`` cells × ``REPEATS`` (see the module's docstring) and its ``matrix.json``."""
    from fsmatrix import matrix
    from fsmatrix.agent.parsing import parse_cell

    entries = []
    baselines: dict[str, str] = {}
    for index in range(cells):
        params, t, config = cell_params(index, made_from)
        spec = parse_cell(params)
        cell_id, group = matrix.cell_id(spec), matrix.group_of(spec)
        baseline = config == 0
        if baseline:
            baselines[group.key] = cell_id
        entries.append(
            {"id": cell_id, "params": params, "group": group.key, "group_label": group.label, "baseline": baseline}
        )
        factor = 1 + SCALE_STEP * config
        for repeat, real in enumerate(t.docs, 1):
            doc = dict(real) | {
                "cell_id": cell_id,
                "repeat": repeat,
                "run_id": run_dir.name,
                "params": params,
                "metrics": _scaled(real.get("metrics") or {}, factor),
            }
            _write(run_dir / cell_id / f"r{repeat}.json", doc)
    matrix_json = {
        "name": "bench-results",
        "file": "(made by fsmatrix.bench.results)",
        "repeat": REPEATS,
        "cells": entries,
        "baseline_rule": "defaults",
        "baselines": baselines,
    }
    _write(run_dir / "matrix.json", matrix_json)


# ----------------------------------------------------------------------------------- the benchmark


@dataclass
class Measurement:
    kind: str  # load, report
    label: str
    seconds: dict[str, list[float]] = field(default_factory=dict)  # by side
    what: dict[str, str] = field(default_factory=dict)  # by side: what was loaded or written

    def ratio(self) -> tuple[float, float, float] | None:
        """After/before: of the medians, and the min and max of the repetitions' pairs."""
        before, after = self.seconds.get("before"), self.seconds.get("after")
        if not before or not after:
            return None
        pairs = [a / b for a, b in zip(after, before, strict=True)]
        return statistics.median(after) / statistics.median(before), min(pairs), max(pairs)


def measure(
    sides: Mapping[str, Side], workdir: Path, documents: int, cells: int, repeat: int, *, warm: bool = True
) -> list[Measurement]:
    """Write the documents under ``workdir`` and time both measurements ``repeat`` times per side,
    alternating (the side going first swaps every repetition), after one untimed report per side
    (``warm``)."""
    made_from = templates()
    root, run_dir = workdir / "results", workdir / "report-run"
    write_results_root(root, documents, made_from)
    write_run_dir(run_dir, cells, made_from)
    paths = {"load": root, "report": run_dir}
    found = [
        Measurement("load", f"loading and typing {documents} result documents"),
        Measurement(
            "report", f"the report of a {cells}-cell run ({cells * REPEATS} documents): load, answer, Markdown, JSON"
        ),
    ]
    for side in sides.values() if warm else ():
        side("report", run_dir)  # warm: the first call's lazy imports
    order = [s for s in SIDES if s in sides]
    for r in range(repeat):
        for m in found:
            for name in order if r % 2 == 0 else order[::-1]:
                seconds, what = sides[name](m.kind, paths[m.kind])
                m.seconds.setdefault(name, []).append(seconds)
                m.what[name] = what
    return found


def resolve(commit: str) -> str:
    """The full sha of ``commit`` in this repository; UserError when it is not a commit."""
    result = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0 or not result.stdout.strip():
        raise UserError(f"--against {commit!r}: not a commit of {REPO}")
    return result.stdout.strip()


def extract_runner(sha: str, into: Path) -> Path:
    """The commit's ``runner/`` under ``into`` (``git archive``): its tree, not a worktree."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", sha, "runner"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "runner"


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as every benchmark records them before and after."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def this_commit() -> str:
    git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    status = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    sha = git.stdout.strip() or "unknown"
    return sha + (" (with local changes)" if status.stdout.strip() else "")


# ----------------------------------------------------------------------------------- the report


def _spread(seconds: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(seconds), "min": min(seconds), "max": max(seconds)}


def to_json(measured: Sequence[Measurement], meta: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = dict(meta)
    out["measurements"] = []
    for m in measured:
        entry: dict[str, Any] = {"kind": m.kind, "label": m.label}
        for side, seconds in m.seconds.items():
            entry[side] = {"n": len(seconds), **_spread(seconds), "seconds": seconds, "what": m.what[side]}
        ratio = m.ratio()
        if ratio is not None:
            entry["ratio"] = {"of_medians": ratio[0], "min": ratio[1], "max": ratio[2]}
        out["measurements"].append(entry)
    return out


def _cell(seconds: Sequence[float] | None) -> str:
    if not seconds:
        return "-"
    s = _spread(seconds)
    return f"{s['median']:.3f} ({s['min']:.3f}..{s['max']:.3f})"


def markdown(measured: Sequence[Measurement], meta: Mapping[str, Any]) -> str:
    load = meta["load_average"]
    lines = [
        "# The results code before and after: loading documents, writing a report",
        "",
        f"{meta['date']}; before: {meta['before']}; after: {meta['after']}; Python {meta['python']}, "
        f"{meta['cpus']} CPUs; load average (1, 5, 15 min) {' '.join(f'{x:.2f}' for x in load['before'])} before, "
        f"{' '.join(f'{x:.2f}' for x in load['after'])} after; {meta['repeat']} repetitions a side, alternating, "
        f"each side in one process of its own; {meta['elapsed_s']:.0f} s in all.",
        "",
        "| measurement | n | before: median (min..max) s | after: median (min..max) s | after/before (pairs) |",
        "|---|---|---|---|---|",
    ]
    for m in measured:
        before, after = m.seconds.get("before"), m.seconds.get("after")
        n = max(len(before or ()), len(after or ()))
        ratio = m.ratio()
        shown = "-" if ratio is None else f"{ratio[0]:.2f} ({ratio[1]:.2f}..{ratio[2]:.2f})"
        lines.append(f"| {m.label} | {n} | {_cell(before)} | {_cell(after)} | {shown} |")
    lines += ["", "What each side loaded or wrote:", ""]
    for m in measured:
        lines.append(f"- {m.kind}: " + "; ".join(f"{side}: {what}" for side, what in m.what.items()))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    interrupt_on_sigterm()  # a timeout's SIGTERM removes the temporary trees as Ctrl-C does
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--against", default=AGAINST, metavar="COMMIT", help="the code before (default: %(default)s)")
    parser.add_argument("--documents", type=int, default=DOCUMENTS, metavar="N", help="documents loaded")
    parser.add_argument("--cells", type=int, default=CELLS, help=f"cells of the reported run ({REPEATS} runs each)")
    parser.add_argument("--repeat", type=int, default=REPEAT, help="timed repetitions a side")
    parser.add_argument("--format", choices=("md", "json"), default="md", help="Markdown or JSON")
    args = parser.parse_args(argv)
    try:
        for name in ("documents", "cells", "repeat"):
            if getattr(args, name) < 1:
                raise UserError(f"--{name} {getattr(args, name)}: must be at least 1")
        before = resolve(args.against)
        templates()  # the real documents are there, before anything is written
        started = time.monotonic()
        load_before = os.getloadavg()
        with tempfile.TemporaryDirectory(prefix="fsmatrix-bench-results-") as tmp, contextlib.ExitStack() as stack:
            work = Path(tmp)
            old = extract_runner(before, work)
            sides: dict[str, Side] = {
                "before": stack.enter_context(worker(old, work)),
                "after": stack.enter_context(worker(RUNNER, work)),
            }
            measured = measure(sides, work, args.documents, args.cells, args.repeat)
        meta = {
            "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            "before": f"{before} (--against {args.against})",
            "after": this_commit(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
            "repeat": args.repeat,
            "documents": args.documents,
            "cells": args.cells,
            "elapsed_s": time.monotonic() - started,
        }
    except UserError as exc:
        print(f"bench.results: error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(to_json(measured, meta), indent=1))
    else:
        print(markdown(measured, meta), end="")
    return 0


if __name__ == "__main__":
    exit_with(main, "fsmatrix.bench.results")
