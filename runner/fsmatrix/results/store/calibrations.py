"""Stored calibrations (``<results root>/calibration/<matrix>-<environment hash>.json``): saving,
reading back with their format checked, and finding the ones made in a given environment."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fsmatrix.agent import jsonfile
from fsmatrix.errors import UserError

CALIBRATION_DIR = "calibration"
# 2: K real batches, between-batch floors (``noise_floor``). 1 (refused): an A/A pair whose
# floor was the spread of the pooled 2N values and whose false-positive rate came from splits.
FORMAT_VERSION = 2


def path_for(results_root: Path, matrix_name: str, env_hash: str) -> Path:
    return results_root / CALIBRATION_DIR / f"{matrix_name}-{env_hash}.json"


def save(calibration: dict[str, Any], results_root: Path) -> Path:
    path = path_for(results_root, calibration["matrix"], calibration["env_hash"])
    path.parent.mkdir(parents=True, exist_ok=True)
    jsonfile.write_atomic(path, calibration)
    return path


def load(path: Path) -> dict[str, Any]:
    try:
        doc = jsonfile.read(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable calibration ({exc})") from exc
    version = doc.get("format_version") if isinstance(doc, dict) else None
    if version == 1:
        # Its floor was the spread of one pooled A/A sample, blind to drift between batches: using
        # it would keep the false alarms this format exists to prevent. No silent fallback either.
        raise UserError(
            f"{path}: a calibration of format 1 (floors from one pooled A/A pair), no longer used; "
            f"run `fsmatrix calibrate` again to measure between-batch floors (format {FORMAT_VERSION})"
        )
    if not isinstance(doc, dict) or version != FORMAT_VERSION or "cells" not in doc:
        raise UserError(f"{path}: not an fsmatrix calibration (format version {FORMAT_VERSION})")
    cells = doc["cells"]
    if not isinstance(cells, dict):
        raise UserError(f"{path}: 'cells' must map cell ids to {{metric: {{noise_floor: number}}}}")
    for cell_id, metrics in cells.items():
        if not isinstance(metrics, dict):
            raise UserError(f"{path}: cells.{cell_id} must map metrics to {{noise_floor: number, ...}}")
        for metric, entry in metrics.items():
            floor = entry.get("noise_floor") if isinstance(entry, dict) else entry
            if (
                not isinstance(entry, dict)
                or "noise_floor" not in entry
                or (floor is not None and (isinstance(floor, bool) or not isinstance(floor, int | float)))
                or (floor is not None and not (0 <= floor < math.inf))
            ):
                raise UserError(
                    f"{path}: cells.{cell_id}.{metric} must be {{noise_floor: number >= 0 or null, ...}}, "
                    f"got {entry!r}"
                )
    return doc


def find(results_root: Path, env_hash: str) -> list[Path]:
    """Stored calibrations made in the environment whose hash is ``env_hash``
    (``environment.env_hash``), newest last."""
    directory = results_root / CALIBRATION_DIR
    if not directory.is_dir():
        return []
    return sorted(directory.glob(f"*-{env_hash}.json"), key=lambda p: p.stat().st_mtime)
