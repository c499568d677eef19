"""The guest image as a matrix axis (``image: [debian12, debian13]``): the default leaves every cell
id as it was; another image shows in the id; a bad name is refused with the images known; `matrix
expand` says before a run what an image's kernel lacks (from its manifest); the host backend
records a cell on another image as skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REPO
from fsmatrix import matrix
from fsmatrix.agent.cell import DEFAULT_IMAGE
from fsmatrix.agent.parsing import parse_cell
from fsmatrix.backends import image
from fsmatrix.cli import main

AXIS = """\
name: images
axes:
  image: [debian12, debian13]
  filesystem: [ext4, jfs]
  workload:
    - threen1: {start: 1, end: 1000}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


def test_the_default_image_keeps_every_id_and_another_shows_in_it(tmp_path: Path) -> None:
    crossed = matrix.load(_write(tmp_path, AXIS))
    plain = matrix.load(_write(tmp_path, AXIS.replace("  image: [debian12, debian13]\n", "")))
    ids = [c.id for c in crossed.cells]
    assert ids[:2] == [c.id for c in plain.cells]  # debian12: the ids of a matrix that names no image
    assert ids[2].startswith("ext4-debian13-threen1-") and ids[3].startswith("jfs-debian13-threen1-")
    assert "image" not in crossed.cells[0].params and crossed.cells[2].params["image"] == "debian13"
    assert parse_cell(crossed.cells[2].params).image == "debian13"
    assert parse_cell(crossed.cells[0].params).image == DEFAULT_IMAGE
    # Debian 12 is each group's baseline: the cell with the fewest settings off their defaults.
    assert crossed.is_baseline(crossed.cells[0]) and not crossed.is_baseline(crossed.cells[2])


def test_upgrade_matrix_crosses_both_images() -> None:
    m = matrix.load(REPO / "matrix" / "upgrade.yaml", scale="small")
    assert len(m.cells) == 12
    assert {c.spec.image for c in m.cells} == {"debian12", "debian13"}
    assert {c.spec.filesystem for c in m.cells} == {"ext4", "xfs", "btrfs"}
    assert {c.spec.workload for c in m.cells} == {"pgbench", "threen1"}


def test_a_bad_image_name_is_refused_with_the_images_known(tmp_path: Path) -> None:
    path = _write(tmp_path, AXIS.replace("debian13]", "debian14]"))
    done = CliRunner().invoke(main, ["matrix", "expand", str(path)])
    assert done.exit_code == 2
    assert done.output.strip().splitlines() == [
        f"fsmatrix: error: {path}:3: image: 'debian14' is not allowed; expected one of debian12, debian13"
    ]


def test_expand_says_what_a_built_images_kernel_lacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest recording the kernel's filesystems and modules (packer/scripts/manifest.py): the
    cells whose filesystem it lacks are named before any run (a stand-in manifest: no image here)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(image.CACHE_ENV, str(cache))
    paths = image.image_paths(image="debian13")
    paths.qcow2.parent.mkdir(parents=True)
    for path in paths.files:
        path.write_text("x")
    paths.manifest.write_text(json.dumps({"image": "debian13", "filesystems": ["ext4"], "modules": ["ext4", "xfs"]}))
    done = CliRunner().invoke(main, ["matrix", "expand", str(_write(tmp_path, AXIS)), "--format", "json"])
    assert done.exit_code == 0, done.output
    warnings = [line for line in done.output.splitlines() if line.startswith("fsmatrix: warning")]
    assert warnings == [
        "fsmatrix: warning: on a VM backend, 1 cell(s) will be skipped: image debian13: the image's kernel has no "
        f"filesystem jfs (1 cell, e.g. {matrix.load(_write(tmp_path, AXIS)).cells[3].id})"
    ]


def test_the_host_backend_skips_a_cell_on_another_image(tmp_path: Path) -> None:
    from fsmatrix.backends.host import HostBackend

    cell = matrix.load(_write(tmp_path, AXIS)).cells[2]
    doc = HostBackend(workdir=tmp_path / "work").run(cell, 1)
    assert doc["status"] == "skipped"
    assert "image 'debian13' is a guest image: run it on a VM backend (--backend qemu)" in doc["reason"]
