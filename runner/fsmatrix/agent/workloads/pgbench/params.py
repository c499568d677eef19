"""pgbench's parameters (``Params``) and what every step of a run or a recovery shares: the database's
name, why a raw device is refused, the deadline (``time_left``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from fsmatrix.agent.declare import Invalid, setting

SCRIPTS = ("tpcb-like", "simple-update", "select-only")
PROTOCOLS = ("simple", "prepared")
DATABASE = "bench"
RAW_UNSUPPORTED = (
    "PostgreSQL cannot run on a raw block device (it needs a filesystem for its files); "
    "seed 004's RAW column is not reproducible with pgbench"
)


@dataclass(frozen=True)
class Params:
    """``cell["workload"]["pgbench"]``, declared once: defaults, bounds and help."""

    script: str = setting("tpcb-like", choices=SCRIPTS, cli=True, help="built-in script: pgbench -b")
    scale: int = setting(10, minimum=1, maximum=100000, help="pgbench -s: 100,000 accounts per unit")
    clients: int = setting(4, minimum=1, maximum=1000, help="pgbench -c: concurrent sessions")
    threads: int = setting(2, minimum=1, maximum=1000, help="pgbench -j: client threads (<= clients)")
    duration: int = setting(60, minimum=1, maximum=86400, help="pgbench -T: seconds of transactions")
    protocol: str = setting("simple", choices=PROTOCOLS, help="pgbench -M: query protocol")
    generate: str = setting("client", choices=("client", "server"), help="load: pgbench -i step g or G")

    def __post_init__(self) -> None:
        if self.threads > self.clients:
            raise Invalid(
                "workload.pgbench.threads",
                f"workload.pgbench.threads {self.threads} is above clients {self.clients}; "
                "pgbench needs threads <= clients",
            )


def time_left(deadline: float, timeout: float, what: str) -> float:
    """Seconds left until ``deadline`` (``time.monotonic``) for the next step, ``what``; past it, the
    run's TimeoutError naming the cell's ``timeout`` and that step."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"pgbench exceeded {timeout:g} s ({what})")
    return left
