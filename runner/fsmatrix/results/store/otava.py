"""Apache Otava, run in a virtualenv of its own: change points of many series in one call.

Why its own virtualenv: apache-otava 0.8.0 pins numpy 2.2 and scipy < 1.17 (and pulls BigQuery,
Slack and pg8000 clients); installed beside fsmatrix it would move the numeric stack under every
figure fsmatrix has measured. So ``make deps`` (and the first ``fsmatrix history`` where it is
missing) makes ``$FSMATRIX_CACHE/otava-venv`` with pip from PyPI; after that no network is needed.

What runs there is ``DRIVER``: it reads every series as JSON on stdin, calls Otava's library
(``otava.analysis.compute_change_points``: E-divisive split in sliding windows, then a merge step that
keeps the change points whose Student t-test p-value is under the threshold — Fleming et al., "Hunter",
ICPE 2023) on each, and writes the change points as JSON on stdout. No permutation test, no random
numbers: the same series give the same change points. A constant series (the bytes read per operation
of a workload that reads nothing: 0 in every run) has none and does not reach Otava's statistics, whose
variances are zero there. The store's stage: this is I/O (a process, a
folder of the cache); the decisions on what Otava finds are ``verdict/history.py``'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from fsmatrix.errors import UserError

REQUIREMENT = "apache-otava==0.8.0"
VENV_NAME = "otava-venv"  # under the cache ($FSMATRIX_CACHE, default /var/cache/fsmatrix)
MARKER = "fsmatrix-otava"  # in a complete virtualenv: the requirement it was made with
MAX_PVALUE = 0.001  # Otava's default threshold (compute_change_points' max_pvalue)
WINDOW = 50  # Otava's default window (compute_change_points' window_len)
PIP_TIMEOUT_S = 900
DETECT_TIMEOUT_S = 1800

DRIVER = """
import json, math, sys
from importlib.metadata import version
from otava.analysis import compute_change_points

job = json.load(sys.stdin)
found = []
for values in job["series"]:
    points = []
    if len(values) >= 2 and len(set(values)) > 1:  # a constant series: nothing changed
        cps, _ = compute_change_points(
            [float(v) for v in values], window_len=job["window"], max_pvalue=job["max_pvalue"], min_magnitude=0.0
        )
        points = [{"index": int(c.index), "p": float(c.stats.pvalue)} for c in cps]
    found.append(points)
json.dump({"otava": version("apache-otava"), "change_points": found}, sys.stdout)
"""


class OtavaUnavailable(UserError):
    """Otava's virtualenv cannot be made (no PyPI, no disk) or its run failed: not bad input, exit 1."""

    exit_status = 1


@dataclass(frozen=True)
class Found:
    """A change point as Otava reports it: ``index`` is the first point after the change."""

    index: int
    p: float


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def ready(venv: Path) -> bool:
    marker = venv / MARKER
    return marker.is_file() and marker.read_text().strip() == REQUIREMENT and python_of(venv).exists()


def ensure(venv: Path, echo: Callable[[str], None] = lambda _: None) -> Path:
    """The virtualenv's interpreter, making the virtualenv first when it is missing or was made for
    another Otava. Made beside its final place and renamed there when complete: a pip killed halfway
    leaves no half virtualenv that looks ready; a lock lets one process make it while others wait."""
    if ready(venv):
        return python_of(venv)
    try:
        venv.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OtavaUnavailable(f"Otava's virtualenv {venv}: cannot make its folder: {exc.strerror}") from None
    with _locked(venv.parent / f".{venv.name}.lock"):
        if ready(venv):  # another process made it while this one waited
            return python_of(venv)
        echo(f"making Otava's virtualenv {venv} ({REQUIREMENT} from PyPI; once)")
        building = venv.parent / f".{venv.name}.{os.getpid()}"
        try:
            shutil.rmtree(building, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(building)], "python -m venv")
            _run(
                [
                    str(python_of(building)),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    REQUIREMENT,
                ],
                f"pip install {REQUIREMENT}",
            )
            (building / MARKER).write_text(REQUIREMENT + "\n")
            shutil.rmtree(venv, ignore_errors=True)  # one made for another Otava, or a leftover
            building.rename(venv)
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return python_of(venv)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(command: list[str], what: str) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OtavaUnavailable(f"Otava's virtualenv: {what} failed: {exc}") from None
    if done.returncode != 0:
        raise OtavaUnavailable(
            f"Otava's virtualenv: {what} failed (exit {done.returncode}): {_last_line(done.stderr)}; "
            "`make deps` makes it where PyPI is reachable"
        )


def detect(
    python: Path, series: Sequence[Sequence[float]], *, max_pvalue: float = MAX_PVALUE, window: int = WINDOW
) -> tuple[str, list[list[Found]]]:
    """Otava's version and the change points of each series, all series in one process."""
    if not series:
        return REQUIREMENT.split("==")[1], []
    job = json.dumps({"series": [list(map(float, s)) for s in series], "max_pvalue": max_pvalue, "window": window})
    try:
        done = subprocess.run(
            [str(python), "-I", "-c", DRIVER],  # -I: none of this environment's PYTHON* settings
            input=job,
            capture_output=True,
            text=True,
            timeout=DETECT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OtavaUnavailable(f"Otava ({python}): {exc}") from None
    if done.returncode != 0:
        raise OtavaUnavailable(f"Otava ({python}) failed (exit {done.returncode}): {_last_line(done.stderr)}")
    answer = json.loads(done.stdout)
    found = [
        [Found(int(c["index"]), float(c["p"])) for c in points if not math.isnan(float(c["p"]))]
        for points in answer["change_points"]
    ]
    return str(answer["otava"]), found


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no message"])[-1]
