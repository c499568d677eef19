"""Cleanup that a second Ctrl-C cannot cut short."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import FrameType

log = logging.getLogger("fsmatrix.storage")


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold back SIGINT while the block runs, then deliver it.

    An interrupt in the middle of unmounting or detaching would leave a mounted filesystem or an
    attached loop device behind; the first Ctrl-C already started this cleanup, so a second one
    waits for it to finish. Signal handlers can only be changed from the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def remember(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        log.warning("interrupt received during storage cleanup; finishing the cleanup first")

    previous = signal.signal(signal.SIGINT, remember)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)


def close_uninterrupted(stack: ExitStack) -> None:
    """Run an ExitStack's callbacks (last registered first) with SIGINT held back."""
    with sigint_deferred():
        stack.close()
