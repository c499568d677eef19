"""The declared footprints (Workload.footprint) against what real runs use: each workload runs once
on a fresh ext4 loop filesystem while the test polls its used space (statvfs), and the peak over the
empty filesystem must stay within the footprint (give or take the files' metadata), and not far below it:

- sysbench, fio: the files are written whole, so 90 %..100 % of the footprint;
- 3n+1: at least a third of it (a small range is dominated by the database's initial allocation
  and the one extension step the footprint allows for; at large ranges its 25 % margin remains);
- pgbench: at least a fifth (the footprint allows for the WAL a checkpoint may keep, up to twice
  the data, and for dead rows; a 5-second run makes little of either: scale 4 used 156 MiB of 544).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import FSMATRIX, needs_root
from fsmatrix.agent import fit
from fsmatrix.agent.parsing import standalone_cell

pytestmark = [needs_root, pytest.mark.system]


@pytest.fixture
def ext4() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fsmatrix-fit-", dir="/var/tmp") as d:
        os.chmod(d, 0o755)  # PostgreSQL's server runs as postgres and must reach its directory
        image, mount = Path(d) / "disk.img", Path(d) / "mnt"
        mount.mkdir()
        with image.open("wb") as f:
            f.truncate(2 << 30)  # sparse
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
        subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
        try:
            yield mount
        finally:
            subprocess.run(["umount", str(mount)], check=True)


def _used(mount: Path) -> int:
    st = os.statvfs(mount)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def _peak_use(mount: Path, args: list[str]) -> int:
    """Peak bytes used on ``mount`` above its empty state while ``fsmatrix workload ...`` runs there."""
    empty = peak = _used(mount)
    proc = subprocess.Popen([*FSMATRIX, "workload", *args, "--dir", str(mount / "w")], stdout=subprocess.DEVNULL)
    while proc.poll() is None:
        peak = max(peak, _used(mount))
        time.sleep(0.02)
    assert proc.returncode == 0
    return peak - empty


@pytest.mark.parametrize(
    ("workload", "params", "args", "low"),
    [
        (
            "sysbench",
            {"mode": "rndrw", "total_size": "128M", "num_files": 4, "duration": 1},
            ["rndrw", "--total-size", "128M", "--num-files", "4", "--duration", "1"],
            0.9,
        ),
        (
            "fio",
            {"pattern": "write", "file_size": "64M", "jobs": 2},
            ["write", "--file-size", "64M", "--jobs", "2"],
            0.9,
        ),
        ("threen1", {"start": 1, "end": 100000}, ["1", "100000", "--workers", "2"], 1 / 3),
        (
            "pgbench",
            {"scale": 4, "clients": 2, "threads": 1, "duration": 5},
            ["tpcb-like", "--scale", "4", "--clients", "2", "--threads", "1", "--duration", "5"],
            1 / 5,
        ),
    ],
)
def test_real_use_within_the_footprint(ext4: Path, workload: str, params: dict, args: list[str], low: float) -> None:  # type: ignore[type-arg]
    fp = fit.footprint(standalone_cell(workload, params))
    assert fp is not None
    used = _peak_use(ext4, [workload, *args])
    print(f"{workload}: used {used >> 20} MiB of a footprint of {fp.total >> 20} MiB ({used / fp.total:.2f})")
    # Over the footprint only by the files' own metadata (extent blocks, the directory), which the
    # filesystem's overhead in the fit check accounts for.
    assert low * fp.total <= used <= fp.total + (1 << 20)
