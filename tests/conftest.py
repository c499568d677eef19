"""Shared fixtures. Tests use the real tools: GT.M, mkfs, mount, losetup, sysbench, fio."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: losetup, mkfs and mount")


@pytest.fixture
def write_matrix(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write a matrix file and return its path."""

    def write(text: str, name: str = "m.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
