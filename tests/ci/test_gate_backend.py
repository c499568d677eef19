"""Where the PR gate measures (FSMATRIX_GATE_BACKEND): pr-gate.yml defaults to the qemu backend on its
KVM runners, a repository variable overrides it, pr-gate.sh passes it to every run of both sides and
refuses anything but a backend fsmatrix has. The runs here are a stand-in `fsmatrix` that records its
arguments (the gate on real runs, on the host backend: tests/ci/test_workflows.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, needs_root
from fsmatrix.backends import BACKENDS

GATE = REPO / ".github" / "scripts" / "pr-gate.sh"


def test_the_workflow_gates_on_the_vm_backend_unless_told_otherwise() -> None:
    env = yaml.safe_load((REPO / ".github" / "workflows" / "pr-gate.yml").read_text())["env"]
    assert env["FSMATRIX_GATE_BACKEND"] == "${{ vars.FSMATRIX_GATE_BACKEND || 'qemu' }}"
    assert "FSMATRIX_GATE_BACKEND" in GATE.read_text().split("--preserve-env=")[1].split()[0]  # through sudo


def _stand_in(where: Path, log: Path) -> Path:
    """A checkout whose `fsmatrix` records its arguments; `compare` says the gate passed."""
    bin_dir = where / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "fsmatrix").write_text(
        f'#!/bin/sh\necho "{where.name} $*" >> "{log}"\n'
        'case "$1" in compare) echo "- gate passed (stand-in)";; esac\n'
    )
    (bin_dir / "fsmatrix").chmod(0o755)
    return where


def _gate(tmp_path: Path, backend: str | None) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    log = tmp_path / "calls.log"
    log.touch()
    base, head = _stand_in(tmp_path / "base", log), _stand_in(tmp_path / "head", log)
    matrix = tmp_path / "pr.yaml"
    matrix.write_text("name: pr\n")
    env = {k: v for k, v in os.environ.items() if k not in ("FSMATRIX_GATE_BACKEND", "GITHUB_STEP_SUMMARY")}
    if backend is not None:
        env["FSMATRIX_GATE_BACKEND"] = backend
    done = subprocess.run(
        ["bash", str(GATE), str(base), str(head), str(matrix), "2", "0.05", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    return done, log.read_text().splitlines()


@needs_root
@pytest.mark.parametrize("backend", [None, *BACKENDS])
def test_every_run_of_both_sides_is_on_the_chosen_backend(tmp_path: Path, backend: str | None) -> None:
    done, calls = _gate(tmp_path, backend)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [c for c in calls if c.split()[1] == "run"]
    assert [c.split()[0] for c in runs] == ["base", "head", "base", "head"]  # interleaved pairs
    chosen = backend or "host"  # the script's own default; the workflow passes qemu
    assert all(f" --backend {chosen} " in f"{c} " for c in runs), runs
    assert f"on the {chosen} backend" in done.stdout


@needs_root
def test_an_unknown_gate_backend_is_refused_before_any_run(tmp_path: Path) -> None:
    done, calls = _gate(tmp_path, "vm")
    assert done.returncode == 2 and calls == []
    assert done.stderr.strip() == "FSMATRIX_GATE_BACKEND=vm: use host, qemu or libvirt"


# ----------------------------------------------------------------------------- the sequential gate


def _scripted(where: Path, log: Path, statuses: Path) -> Path:
    """A checkout whose `fsmatrix` records its arguments and whose `compare` exits with the next of
    ``statuses`` (one per line: 0 PASS, 1 FAIL, 3 NOT DECIDED), printing the verdict's line as compare does."""
    bin_dir = where / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "fsmatrix").write_text(
        f'#!/bin/bash\necho "{where.name} $*" >> "{log}"\n'
        '[ "$1" = compare ] || exit 0\n'
        f'status=$(head -n 1 "{statuses}"); sed -i 1d "{statuses}"\n'
        'while [ $# -gt 0 ]; do [ "$1" = --flagged-to ] && echo "cell-a" > "$2"; shift; done\n'
        'case $status in 0) echo "- gate PASSED: stand-in";; 1) echo "- GATE FAILED: stand-in";;'
        ' 3) echo "- gate NOT DECIDED: at the measured pair spread of 14.0%, stand-in";; esac\n'
        'exit "$status"\n'
    )
    (bin_dir / "fsmatrix").chmod(0o755)
    return where


def _sequential(
    tmp_path: Path, statuses: list[int], settings: dict[str, str], repeats: str = "3"
) -> tuple[subprocess.CompletedProcess[str], list[str], Path]:
    log, script = tmp_path / "calls.log", tmp_path / "statuses"
    log.touch()
    script.write_text("".join(f"{s}\n" for s in statuses))
    base, head = _scripted(tmp_path / "base", log, script), _scripted(tmp_path / "head", log, script)
    matrix = tmp_path / "pr.yaml"
    matrix.write_text("name: pr\n")
    drop = ("FSMATRIX_GATE_BACKEND", "GITHUB_STEP_SUMMARY", "MAX_PAIRS", "PAIRS_STEP", "TIME_BUDGET", "NOT_DECIDED")
    env = {**{k: v for k, v in os.environ.items() if k not in drop}, **settings}
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(GATE), str(base), str(head), str(matrix), repeats, "0.05", str(out), "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    return done, log.read_text().splitlines(), out


def _pairs(calls: list[str], run_id: str = "head") -> list[int]:
    return [int(c.split("--repeat ")[1].split()[0]) for c in calls if f"--run-id {run_id} " in f"{c} "]


@needs_root
def test_not_decided_adds_pairs_until_the_gate_passes(tmp_path: Path) -> None:
    done, calls, out = _sequential(tmp_path, [3, 3, 0], {"MAX_PAIRS": "7", "PAIRS_STEP": "2"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert _pairs(calls) == [1, 2, 3, 4, 5, 6, 7] and _pairs(calls, "base") == [1, 2, 3, 4, 5, 6, 7]
    compares = [c for c in calls if c.split()[1] == "compare"]
    assert len(compares) == 3 and all("--looks 3:2:7 " in c for c in compares), compares
    assert (out / "verdict.txt").read_text() == "PASS\n" and (out / "pairs.txt").read_text() == "7\n"
    assert "**fsmatrix gate: PASS** after 7 pairs: gate PASSED: stand-in" in (out / "summary.md").read_text()


@pytest.mark.parametrize(
    ("not_decided", "status"), [(None, 3), ("distinct", 3), ("neutral", 0), ("fail", 1), ("pass", 0)]
)
@needs_root
def test_the_budget_of_pairs_ends_not_decided_as_told(tmp_path: Path, not_decided: str | None, status: int) -> None:
    settings = {"MAX_PAIRS": "6", "PAIRS_STEP": "2", **({"NOT_DECIDED": not_decided} if not_decided else {})}
    done, calls, out = _sequential(tmp_path, [3, 3, 3], settings)
    assert done.returncode == status, done.stdout + done.stderr
    assert _pairs(calls) == [1, 2, 3, 4, 5, 6]  # 3, then 2 more, then the last one MAX_PAIRS allows
    assert "not decided after 6 pairs, the most the gate runs" in done.stdout
    assert (out / "verdict.txt").read_text() == "NOT DECIDED\n"
    summary = (out / "summary.md").read_text()
    assert summary.startswith("**fsmatrix gate: NOT DECIDED** after 6 pairs: gate NOT DECIDED: at the measured")
    assert ("::notice title=fsmatrix gate NOT DECIDED::gate NOT DECIDED" in done.stdout) == (not_decided == "neutral")


@needs_root
def test_the_time_budget_stops_adding_pairs(tmp_path: Path) -> None:
    # bash takes SECONDS from the environment: the gate has "run" 10 minutes already.
    done, calls, _ = _sequential(tmp_path, [3], {"MAX_PAIRS": "8", "TIME_BUDGET": "10", "SECONDS": "600"})
    assert done.returncode == 3 and _pairs(calls) == [1, 2, 3]
    assert "the time budget of 10 minutes is spent" in done.stdout


@needs_root
def test_a_fail_at_a_look_is_confirmed_before_the_gate_fails(tmp_path: Path) -> None:
    done, calls, out = _sequential(tmp_path, [3, 1, 1], {"MAX_PAIRS": "7", "PAIRS_STEP": "2"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert _pairs(calls) == [1, 2, 3, 4, 5]  # stopped at the look that failed
    assert _pairs(calls, "head-confirm") == [1, 2] and all(
        "--only cell-a" in c for c in calls if "--run-id head-confirm" in c
    )
    last = [c for c in calls if c.split()[1] == "compare"][-1]
    assert "--confirm" in last and "--looks 3:2:7" in last
    assert (out / "verdict.txt").read_text() == "FAIL\n"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"NOT_DECIDED": "maybe"}, "NOT_DECIDED=maybe: use distinct, neutral, fail or pass"),
        ({"MAX_PAIRS": "lots"}, "REPEATS, MAX_PAIRS, PAIRS_STEP and TIME_BUDGET are whole numbers (got 'lots')"),
    ],
)
@needs_root
def test_bad_gate_settings_are_refused_before_any_run(tmp_path: Path, settings: dict[str, str], message: str) -> None:
    done, calls, _ = _sequential(tmp_path, [], settings)
    assert done.returncode == 2 and calls == [] and done.stderr.strip() == message


@needs_root
def test_a_gate_that_adds_pairs_from_fewer_than_3_is_refused_before_any_run(tmp_path: Path) -> None:
    # compare --looks judges no look of fewer than 3 pairs: refused at once, not after every pair has run
    done, calls, _ = _sequential(tmp_path, [], {"MAX_PAIRS": "4"}, repeats="2")
    assert done.returncode == 2 and calls == []
    assert done.stderr.strip() == "REPEATS=2 with MAX_PAIRS=4: a gate that adds pairs starts with at least 3"
