"""Errors the user can fix: printed as one clear message and exit status 2, never a traceback."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

INTERRUPTED = "interrupted; cleaned up"


class UserError(Exception):
    """Bad input: a matrix file, an option, a device. ``str()`` is the whole message."""

    exit_status = 2

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None) -> None:
        self.file = file
        self.line = line
        self.message = message
        where = ""
        if file is not None:
            where = f"{file}:{line}: " if line is not None else f"{file}: "
        super().__init__(where + message)


def _interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt(f"signal {signum}")


def interrupt_on_sigterm() -> None:
    """Make SIGTERM (``kill``, ``timeout``, a CI job cancelled) take Ctrl-C's path, so every context manager
    on the way out unmounts, detaches and stops what it started. For every entry point that runs cells."""
    signal.signal(signal.SIGTERM, _interrupt)


def exit_with(main: Callable[[], int], prog: str) -> NoReturn:
    """A ``python -m`` entry point's last line: exit with ``main()``'s status; on Ctrl-C or SIGTERM (once
    every ``finally`` on the way out has cleaned up) one line and status 130, and on a ``UserError`` that
    ``main`` let through its one line and status 2: never a traceback."""
    try:
        status = main()
    except KeyboardInterrupt:
        print(f"{prog}: {INTERRUPTED}", file=sys.stderr)
        sys.exit(130)
    except UserError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_status)
    sys.exit(status)
