"""A qemu-backend cell run by fsmatrix inside the runner's container image, under TCG, its guest
image from the shared cache volume: results carry both images' identity, and no QEMU outlives
the container. The container image itself: tests/ci/test_container.py.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

import test_container
from fsmatrix.backends import image
from test_container import LABEL, SMALL, _check_results, _nothing_left, podman_run

pytestmark = test_container.pytestmark  # root, podman
tag = test_container.tag  # the fixture: the container image, built or reused


@pytest.mark.image
def test_qemu_backend_cell_inside(tag: str, tmp_path: Path, workdir: Path) -> None:
    # The guest image: built (or reused) in the shared cache, as the README's first command does.
    cache = image.cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    build = subprocess.run(
        ["podman", "run", "--rm", "--privileged", "--network=host", "--label", LABEL, "-v", f"{cache}:{cache}",
         tag, "image", "build"],
        capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    (tmp_path / "results").mkdir()
    (tmp_path / "ctr.yaml").write_text(SMALL)
    volumes = {
        cache: str(cache),
        workdir: "/var/tmp/fsmatrix",
        tmp_path / "results": "/work/results",
        tmp_path / "ctr.yaml": "/work/matrix/ctr.yaml",
    }
    started = time.monotonic()
    done = podman_run(
        tag, "run", "matrix/ctr.yaml", "--backend", "qemu", volumes=volumes, privileged=True, timeout=1800
    )
    print(f"qemu cell in the container: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = _check_results(tmp_path / "results", tag, "qemu")
    assert doc["provenance"]["host"]["qemu_version"]
    _nothing_left(workdir)
    leftover = subprocess.run(["pgrep", "-f", f"qemu-system.*{workdir}"], capture_output=True, check=False)
    assert leftover.returncode == 1, "a QEMU started in the container outlived it"
