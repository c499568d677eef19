"""The kernel's page cache: emptied before a measured phase so it starts cold, as the seeds did."""

from __future__ import annotations

import os
from pathlib import Path

DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def drop_caches() -> None:
    """Write dirty pages back, then drop the page cache, dentries and inodes (needs root)."""
    # drop_caches only frees clean pages: without the sync, data still dirty from a prepare phase
    # would stay cached and be written back during the measurement.
    os.sync()
    try:
        DROP_CACHES.write_text("3\n")
    except OSError as exc:
        raise PermissionError(f"cannot drop the page cache (write 3 to {DROP_CACHES}): {exc}") from exc
