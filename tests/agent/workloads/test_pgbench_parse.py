"""pgbench's output parsers on captured output, without a server (tests/agent/workloads/test_pgbench.py
runs real PostgreSQL): the summary it prints and its per-transaction log (pgbench -l)."""

from __future__ import annotations

import pytest

from conftest import Golden, golden_cases
from fsmatrix.agent.workloads.pgbench import parse as pgparse


@pytest.mark.parametrize("case", golden_cases("pgbench/summary"))
def test_parse_output_golden(case: Golden) -> None:
    """Every captured pgbench summary in tests/data/pgbench/summary/ parses to its expected figures, or is refused."""
    case.check(pgparse.parse_output)


@pytest.mark.parametrize("case", golden_cases("pgbench/log"))
def test_parse_log_golden(case: Golden) -> None:
    """Every per-transaction log (pgbench -l) in tests/data/pgbench/log/ gives its expected latencies."""
    case.check(lambda text: pgparse.parse_log(text.splitlines()))
