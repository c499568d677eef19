"""Bad input anywhere in the CLI (issue 15): one line naming what is wrong and what is allowed,
exit status 2, no traceback, and quickly; and a host-side failure during a run becomes a recorded
failed run while the matrix goes on."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import FSMATRIX, REPO
from fsmatrix import matrix
from fsmatrix.agent import job, options
from fsmatrix.agent.parsing import standalone_cell
from fsmatrix.agent.storage import filesystems
from fsmatrix.errors import UserError
from fsmatrix.matrix import Matrix, MatrixCell
from fsmatrix.results import store

OK_CELL = "defaults: {workload.threen1: {start: 1, end: 100}}\n"


def refused(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """Run the CLI; it must exit 2 with exactly one line on stderr and no traceback. Returns the line."""
    started = time.monotonic()
    done = subprocess.run([*FSMATRIX, *args], capture_output=True, text=True, timeout=60, env=env, cwd=cwd, check=False)
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("fsmatrix: error: ")
    assert elapsed < 15, f"took {elapsed:.1f} s"  # interpreter start-up included, on a shared machine
    return lines[0]


def expand_refuses(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "m.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    line = refused("matrix", "expand", str(path))
    assert str(path) in line
    return line


# --------------------------------------------------------------------------------------------
# mkfs_options / mount_options: options only


@pytest.mark.parametrize(
    ("filesystem", "value", "why"),
    [
        ("ext4", "-q sdb", "'sdb' is a positional argument"),  # mke2fs would take sdb as the device
        ("ext4", "-J device=/dev/sdb", "'/' is not allowed"),
        ("ext4", "-F -F", "-F is a force flag"),  # twice: mke2fs formats even a mounted device
        ("ext4", "-m 0; rm -rf x", "';' is not allowed"),
        ("ext4", "$(reboot)", "'$' is not allowed"),
        ("ext4", "-m", "'-m' needs a value"),
        ("ext4", "-Z", "-Z is not an option of mkfs.ext4"),
        ("xfs", "-f", "-f is a force flag"),
        ("xfs", "-l logdev=/dev/sdc", "'/' is not allowed"),
        ("btrfs", "--force", "is a force flag"),
        ("btrfs", "--label x", "'x' is a positional argument"),
        ("xfs", "--", "would end the options"),
    ],
)
def test_mkfs_options_must_be_options(tmp_path: Path, filesystem: str, value: str, why: str) -> None:
    line = expand_refuses(
        tmp_path, f"axes:\n  filesystem: [{filesystem}]\n  mkfs_options: [{json.dumps(value)}]\n{OK_CELL}"
    )
    assert ":3: mkfs_options" in line and why in line and "allowed: options only" in line


@pytest.mark.parametrize(
    "value", ["logdev=/dev/sdb", "journal_path=/dev/x", "noatime data=writeback", "noatime;reboot", "a'b"]
)
def test_mount_options_must_be_options(tmp_path: Path, value: str) -> None:
    line = expand_refuses(tmp_path, f"axes:\n  filesystem: [ext4]\n  mount_options: [{json.dumps(value)}]\n{OK_CELL}")
    assert ":3: mount_options" in line and "NAME or NAME=VALUE" in line


def test_real_options_pass() -> None:
    for name, text in [
        ("ext4", "-O ^has_journal -m 0"),
        ("ext4", "-E stride=16,stripe_width=64 -b 4096 -I 256 -L data"),
        ("ext4", "-qm0"),
        ("xfs", "-i size=512 -d su=64k,sw=4 -l size=64m -m crc=1"),
        ("btrfs", "-m single -d single --csum=xxhash -n 16k"),
        ("f2fs", "-O extra_attr,compression"),
        ("reiserfs", "-b 4096"),
    ]:
        fs = filesystems.get(name)
        options.check_mkfs_options(fs.mkfs[0], fs.mkfs_getopt, text)
    for text in ("noatime,data=writeback", "noatime,nobarrier,commit=60", "compress=zstd:3,ssd", ""):
        options.check_mount_options(text)


def test_repo_matrices_still_expand() -> None:
    for path in sorted((REPO / "matrix").rglob("*.yaml")):
        matrix.load(path)


# --------------------------------------------------------------------------------------------
# sizes the kernel or the tools refuse


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ("storage.disk_size: '0'", "storage.disk_size '0': must be more than 0"),
        ("{filesystem: xfs, storage.disk_size: 100M}", "mkfs of xfs (data) needs at least 300 MiB"),
        ("{storage.layout: md-raid0, storage.stripe_size: 3K}", "power of two of at least 4K"),
        ("{storage.layout: md-raid0, storage.stripe_size: 48K}", "power of two"),
        ("{storage.layout: lvm-stripe, storage.stripe_size: 8M}", "LVM stripes at most one extent"),
        ("{storage.layout: md-raid0, storage.stripe_size: 1G, storage.disk_size: 512M}", "exceeds storage.disk_size"),
    ],
)
def test_sizes_refused_by_expand(tmp_path: Path, settings: str, why: str) -> None:
    text = f"axes:\n  filesystem: [ext4]\ninclude:\n  - {settings}\n{OK_CELL}"
    if not settings.startswith("{"):
        text = f"axes:\n  filesystem: [ext4]\ndefaults:\n  workload.threen1: {{start: 1, end: 100}}\n  {settings}\n"
    assert why in expand_refuses(tmp_path, text)


# --------------------------------------------------------------------------------------------
# matrix files


def test_matrix_not_utf8(tmp_path: Path) -> None:
    line = expand_refuses(tmp_path, b"axes:\n  filesystem: [ext4]\n# caf\xe9\n")
    assert ":3: not UTF-8 text (byte 0xe9)" in line


def test_matrix_too_many_cells_refused_before_expansion(tmp_path: Path) -> None:
    axes = "".join(
        f"  workload.threen1.{k}: [{', '.join(str(i) for i in range(1, 101))}]\n" for k in ("start", "end", "workers")
    )
    started = time.monotonic()
    with pytest.raises(UserError, match="up to 1000000 cells .axes 100 × 100 × 100.; at most 10000"):
        matrix.expand_document(matrix.yamlpos.load(f"axes:\n{axes}"), "big.yaml")
    assert time.monotonic() - started < 5.0  # refused up front: expanding would take minutes
    assert "at most 10000" in expand_refuses(tmp_path, f"axes:\n{axes}")


def test_matrix_too_many_repeats(tmp_path: Path) -> None:
    assert "repeat 1000000 must be an integer from 1 to 1000" in expand_refuses(
        tmp_path, f"axes:\n  filesystem: [ext4]\n{OK_CELL}repeat: 1000000\n"
    )
    path = tmp_path / "ok.yaml"
    path.write_text(f"axes:\n  filesystem: [ext4]\n{OK_CELL}")
    # An option out of range is click's own usage error: exit 2, the usage and one "Error:" line.
    done = subprocess.run([*FSMATRIX, "run", str(path), "--repeat", "100000"], capture_output=True, text=True)
    assert done.returncode == 2 and "'--repeat': 100000 is not in the range 1<=x<=1000" in done.stderr


def test_yaml_alias_bomb_refused_while_parsing(tmp_path: Path) -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10^9 values
    text = "description:\n  " + "\n  ".join(levels) + "\naxes:\n  filesystem: [ext4]\n  mount_options: *a8\n"
    started = time.monotonic()
    with pytest.raises(UserError, match="more than 100000 values"):
        path = tmp_path / "bomb.yaml"
        path.write_text(text)
        matrix.load(path)
    assert time.monotonic() - started < 5.0  # refused up front: expanding would take minutes
    assert "aliases expanded" in expand_refuses(tmp_path, text)
    assert "refers to a node that contains it" in expand_refuses(tmp_path, "axes: &a\n  filesystem: [*a]\n")


def test_matrix_file_too_large(tmp_path: Path) -> None:
    assert "a matrix file may have at most" in expand_refuses(tmp_path, "#" * (2 << 20) + "\n")


# --------------------------------------------------------------------------------------------
# the other commands


def test_set_with_broken_yaml(tmp_path: Path) -> None:
    line = refused("workload", "threen1", "1", "10", "--dir", str(tmp_path / "w"), "--set", "a=[")
    assert "--set 'a=['" in line and "YAML scalar" in line


def test_workload_without_gtm(tmp_path: Path) -> None:
    """GT.M pointed at a directory without it ($gtm_dist, which the workload honours first)."""
    env = dict(os.environ, gtm_dist=str(tmp_path / "no-gtm"))
    line = refused("workload", "threen1", "1", "10", "--dir", str(tmp_path / "w"), env=env)
    assert "threen1:" in line and "no mumps executable" in line


def test_unwritable_dir_results_and_workdir(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert "--dir" in refused("workload", "threen1", "1", "10", "--dir", str(blocker / "w"))
    path = tmp_path / "ok.yaml"
    path.write_text(f"axes:\n  filesystem: [ext4]\n{OK_CELL}")
    line = refused("run", str(path), "--results", str(blocker / "r"))
    assert f"--results {blocker / 'r'}: not a writable directory (Not a directory)" in line
    line = refused("run", str(path), "--results", str(tmp_path / "r"), "--workdir", "/proc/fsmatrix")
    assert "--workdir /proc/fsmatrix: not a writable directory" in line


def result_doc(**changes: Any) -> dict[str, Any]:
    doc = job.result_document(
        job.CellRepeat(standalone_cell("threen1", {"start": 1, "end": 10}), "c1", 1),
        status="passed",
        reason=None,
        started_at="2026-01-01T00:00:00+00:00",
        provenance={},
    )
    doc.update(metrics={"wall_s": 1.0})
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


def results_dir(root: Path, **changes: Any) -> Path:
    (root / "c1").mkdir(parents=True)
    (root / "c1" / "r1.json").write_text(json.dumps(result_doc(**changes)))
    return root


def test_compare_refuses_unusable_results(tmp_path: Path) -> None:
    good = results_dir(tmp_path / "good")
    no_id = results_dir(tmp_path / "no-id", cell_id=None)
    line = refused("compare", str(good), str(no_id))
    assert "cell_id is None; expected the cell's id" in line
    sideways = results_dir(tmp_path / "sideways", key_metrics={"wall_s": "sideways"})
    line = refused("compare", str(good), str(sideways))
    assert "key_metrics.wall_s is 'sideways'; expected 'lower' or 'higher'" in line


def test_calibration_of_the_wrong_shape(tmp_path: Path) -> None:
    good = results_dir(tmp_path / "good")
    calibration = tmp_path / "cal.json"
    calibration.write_text(json.dumps({"format_version": 2, "cells": {"c1": {"wall_s": 0.5}}}))
    line = refused("compare", str(good), str(good), "--calibration", str(calibration))
    assert "cells.c1.wall_s must be {noise_floor: number >= 0 or null, ...}" in line
    calibration.write_text(json.dumps({"format_version": 2, "cells": ["c1"]}))
    assert "'cells' must map cell ids" in refused("compare", str(good), str(good), "--calibration", str(calibration))


# --------------------------------------------------------------------------------------------
# a host-side failure is a failed run, not the end of the matrix


class FailingBackend:
    """A backend whose first run fails on the host (ENOSPC creating its files) and whose second
    works: stands in for a qemu-img, job-disk or losetup failure, which need a full disk to happen."""

    name = "failing"

    def __init__(self) -> None:
        self.calls = 0

    def preflight(self, cells: list[MatrixCell]) -> None:
        pass

    def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 1:
            raise OSError(28, "No space left on device", "/var/tmp/fsmatrix/x.img")
        doc = result_doc()
        doc.update(cell_id=cell.id, repeat=repeat)
        return doc

    def environment(self) -> dict[str, Any]:
        return {"backend": self.name}

    def close(self) -> None:
        pass


def test_host_side_failure_is_recorded_and_the_matrix_goes_on(tmp_path: Path) -> None:
    from rich.console import Console

    from fsmatrix import racing, runs

    m = matrix.expand_document(matrix.yamlpos.load(f"axes:\n  filesystem: [ext4, xfs]\n{OK_CELL}"), "m.yaml")
    assert isinstance(m, Matrix)
    options = runs.RunOptions(tmp_path, "r", racing.RunPlan.fixed(1))
    summary = runs.run_matrix(m, m.cells, FailingBackend(), options, Console())
    assert summary.counts == {"error": 1, "passed": 1}
    first = json.loads(store.result_path(summary.run_dir, m.cells[0].id, 1).read_text())
    assert first["status"] == "error"
    assert first["reason"] == (
        "host side of the run failed: OSError: [Errno 28] No space left on device: '/var/tmp/fsmatrix/x.img'"
    )
