"""The PostgreSQL helpers' parser of the server's log on captured logs, without a server (real
clusters: tests/agent/workloads/test_pgbench.py and tests/crash/test_pgcrash.py)."""

from __future__ import annotations

import pytest

from conftest import Golden, golden_cases
from fsmatrix.agent.databases import postgres


@pytest.mark.parametrize("case", golden_cases("postgres/recovery_log"))
def test_parse_recovery_log_golden(case: Golden) -> None:
    """Every captured server log in tests/data/postgres/recovery_log/ parses to its expected recovery."""
    case.check(postgres.parse_recovery_log)
