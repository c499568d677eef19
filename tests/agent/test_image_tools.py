"""The guest side of named images: the agent finds PostgreSQL and GT.M where the image's definition
declares them (its manifest's ``tools``), never by searching, and refuses a job for another image."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pytest

from fsmatrix.agent import guest, provenance
from fsmatrix.agent.databases import gtm, postgres


def _manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **doc: object) -> None:
    path = tmp_path / "image.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(provenance, "IMAGE_MANIFEST", path)


def test_tools_come_from_the_images_declaration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installed_pg = Path(sorted(glob.glob(postgres.BIN_GLOB))[-1]).parent  # this host's real installs
    installed_gtm = Path(sorted(glob.glob(gtm.DIST_GLOB))[-1]).parent
    _manifest(tmp_path, monkeypatch, tools={"postgres_bin": str(installed_pg), "gtm_dist": str(installed_gtm)})
    assert postgres.locate_bin({}) == installed_pg and gtm.locate_dist({}) == installed_gtm
    # Declared but not there: one clear line, never another install found by searching.
    empty = tmp_path / "empty"
    empty.mkdir()
    _manifest(tmp_path, monkeypatch, tools={"postgres_bin": str(empty), "gtm_dist": str(empty)})
    with pytest.raises(FileNotFoundError, match=rf"declares PostgreSQL in {empty} \(tools.postgres_bin\)"):
        postgres.locate_bin({})
    with pytest.raises(FileNotFoundError, match=rf"declares GT.M in {empty} \(tools.gtm_dist\)"):
        gtm.locate_dist({})
    # The user's override still wins; outside an image (no manifest) the host's install is found.
    assert postgres.locate_bin({"FSMATRIX_PG_BIN": str(installed_pg)}) == installed_pg
    monkeypatch.setattr(provenance, "IMAGE_MANIFEST", tmp_path / "none.json")
    assert provenance.image_tool("postgres_bin") is None and postgres.locate_bin({}) == installed_pg


def test_gtm_gets_the_environment_its_image_declares(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian 13's glibc refuses libgtmutil.so's executable stack unless a tunable allows it: the
    image declares that (tools.gtm_dist.env), and every GT.M process of the agent gets it."""
    d = tmp_path
    db = gtm.Database(d, d / "g.gld", d / "g.dat", None, d, d, d, gtm.Settings())
    monkeypatch.setenv("GLIBC_TUNABLES", "from-the-caller")
    _manifest(tmp_path, monkeypatch, tool_env={"gtm_dist": {"GLIBC_TUNABLES": "glibc.rtld.execstack=2"}})
    assert db.env()["GLIBC_TUNABLES"] == "glibc.rtld.execstack=2"
    _manifest(tmp_path, monkeypatch, tools={})
    assert db.env()["GLIBC_TUNABLES"] == "from-the-caller" and provenance.image_tool_env("gtm_dist") == {}


def test_results_keep_the_manifest_without_the_module_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _manifest(tmp_path, monkeypatch, image="debian13", modules=["xfs"] * 3000, filesystems=["ext4"])
    assert provenance.collect()["image"] == {"image": "debian13", "filesystems": ["ext4"]}


@pytest.mark.parametrize(("cell_image", "built"), [("debian13", "debian12"), (None, "debian13"), ("debian13", None)])
def test_the_guest_refuses_a_job_for_another_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cell_image: str | None, built: str | None
) -> None:
    _manifest(tmp_path, monkeypatch, **({"image": built} if built else {}))
    cell = {"filesystem": "tmpfs", "workload": {"threen1": {"start": 1, "end": 100}}}
    if cell_image:
        cell["image"] = cell_image
    job = {"cell": cell, "cell_id": "tmpfs-t", "repeat": 1, "data_serials": [], "environment": {}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    result = guest.run(tmp_path, by_id=tmp_path, workdir=tmp_path / "work")
    wanted, guest_image = cell_image or "debian12", built or "debian12"
    assert result["status"] == "error"
    assert f"the cell is for image {wanted!r}, but this guest is image {guest_image!r}" in result["reason"]
