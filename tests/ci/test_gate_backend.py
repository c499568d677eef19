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
