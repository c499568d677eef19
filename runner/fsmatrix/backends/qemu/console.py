"""A guest's serial console, as QEMU writes it to a file: its tail for error messages, and a
watcher for a marker line (the agent started, the measured part began)."""

from __future__ import annotations

from pathlib import Path

CONSOLE_TAIL_LINES = 40


def console_tail(path: Path, lines: int = CONSOLE_TAIL_LINES) -> str:
    """The last ``lines`` lines of a console log (empty when there is none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.replace("\r", "").splitlines()[-lines:])


class ConsoleWatcher:
    """Whether a marker has appeared in a growing console log; reads each byte once."""

    def __init__(self, path: Path, marker: bytes) -> None:
        self.path, self.marker = path, marker
        self._offset = 0
        self._tail = b""
        self._seen = False

    def seen(self) -> bool:
        if self._seen:
            return True
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except OSError:  # QEMU has not created it yet
            return False
        self._offset += len(chunk)
        # Keep the end of the previous chunk: the marker may straddle two reads.
        text = self._tail + chunk
        self._seen = self.marker in text
        self._tail = text[-len(self.marker) :]
        return self._seen
