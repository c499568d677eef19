"""The newc cpio format: what an initramfs is (the accelerator probe's, and a vm.kernel's)."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence

Entry = tuple[str, int, bytes, int]  # (name, mode with its file type bits, data, rdev)


def newc(entries: Sequence[Entry]) -> bytes:
    """A newc cpio archive of ``entries``, in order (a directory before what it holds)."""
    out = io.BytesIO()

    def pad() -> None:
        out.write(b"\0" * (-out.tell() % 4))

    for ino, (name, mode, data, rdev) in enumerate([*entries, ("TRAILER!!!", 0, b"", 0)], start=1):
        raw = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, os.major(rdev), os.minor(rdev), len(raw), 0]
        out.write(b"070701" + b"".join(f"{f:08x}".encode() for f in fields))
        out.write(raw)
        pad()
        out.write(data)
        pad()
    return out.getvalue()
