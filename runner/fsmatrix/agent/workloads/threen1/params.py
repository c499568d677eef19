"""3n+1's parameters (``Params``) and what the run, the verification and the recovery share: the
routine, the digit words, the database's name, the setup's time, the deadline (``time_left``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import declare
from fsmatrix.agent.declare import Invalid, setting
from fsmatrix.agent.workloads.threen1 import memory as threen1_memory

ROUTINE = Path(__file__).with_name("threen1.m")
WORDS_FILE = threen1_memory.WORDS_FILE
DB_NAME = "threen1"
KEY_MODES = threen1_memory.KEY_MODES
# Time allowed for creating the database, compiling and reading the header, out of `timeout`.
SETUP_TIMEOUT = 300.0


@dataclass(frozen=True)
class Params:
    """``cell["workload"]["threen1"]``, declared once: defaults, bounds and help."""

    start: int = setting(minimum=1, cli=True, help="first starting number")
    end: int = setting(minimum=1, cli=True, help="last starting number (>= start)")
    workers: int = setting(4, minimum=1, maximum=1024, help="GT.M worker processes")
    block: int = setting(5000, minimum=1, help="starting numbers a worker claims at a time")
    keys: str = setting("spelled", choices=KEY_MODES, help="subscripts and values as digit words or integers")

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise Invalid(
                "workload.threen1.end",
                f"workload.threen1.end {self.end} is below start {self.start}; the range must have end >= start",
            )

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> Params:
        return declare.parse(cls, params, "workload.threen1")

    @property
    def count(self) -> int:
        return self.end - self.start + 1


def time_left(deadline: float, timeout: float) -> float:
    """Seconds left until ``deadline`` (``time.monotonic``) for the next step of a run or a recovery;
    past it, the TimeoutError naming the cell's ``timeout``."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"3n+1 exceeded {timeout:g} s before the workers started")
    return left
