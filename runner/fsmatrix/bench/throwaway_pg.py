"""A throwaway PostgreSQL cluster, for the store's benchmark and tests: initdb in a temporary directory
owned by the ``postgres`` OS user (PostgreSQL refuses to run as root), listening on a Unix socket only,
stopped (``pg_ctl stop -m immediate``) and removed by ``cluster()`` on every way out. Debian's
PostgreSQL 15 (``make deps`` installs it for the pgbench workload)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BIN = Path("/usr/lib/postgresql/15/bin")
OS_USER = "postgres"  # the server's OS user, and the superuser role (trust on the socket)
PASSWORD_ROLE = "fsm_pusher"  # a role that logs in with a password (scram-sha-256)


def available() -> bool:
    return (BIN / "initdb").exists() and shutil.which("runuser") is not None


def _as_postgres(*args: str, timeout: float = 120) -> None:
    subprocess.run(["runuser", "-u", OS_USER, "--", *args], check=True, capture_output=True, timeout=timeout)


@dataclass
class Cluster:
    home: Path  # owned by postgres: data/, sock/, log

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def socket_dir(self) -> Path:
        return self.home / "sock"

    def start(self) -> None:
        options = f"-c listen_addresses='' -k {self.socket_dir} -c fsync=off -c full_page_writes=off"
        _as_postgres(
            str(BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.home / "log"), "-o", options, "-w", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        done = subprocess.run(
            ["runuser", "-u", OS_USER, "--", str(BIN / "pg_ctl"), "-D", str(self.data), "status"],
            capture_output=True,
            check=False,
        )
        return done.returncode == 0

    def url(self, database: str, user: str = OS_USER, password: str | None = None) -> str:
        who = f"{user}:{password}" if password is not None else user
        return f"postgresql://{who}@/{database}?host={self.socket_dir}"

    def connect(self, database: str = "postgres") -> Any:
        """A superuser connection (autocommit) to ``database``."""
        import psycopg

        return psycopg.connect(host=str(self.socket_dir), user=OS_USER, dbname=database, autocommit=True)

    def sql(self, statement: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        with self.connect(database) as db:
            cursor = db.execute(statement)
            return list(cursor.fetchall()) if cursor.description else []

    def create_database(self, name: str, owner: str = OS_USER) -> None:
        self.sql(f'CREATE DATABASE "{name}" OWNER "{owner}"')

    def tables(self, database: str) -> set[str]:
        rows = self.sql("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'", database)
        return {str(r[0]) for r in rows}


@contextlib.contextmanager
def cluster(password: str) -> Iterator[Cluster]:
    """A running cluster; the superuser ``postgres`` logs in on the socket without a password
    (trust), every other role with one (scram-sha-256); ``PASSWORD_ROLE`` has ``password``."""
    home = Path(tempfile.mkdtemp(prefix="fsm-pg-", dir="/tmp"))  # short: a socket path has ~107 bytes
    try:
        shutil.chown(home, OS_USER, OS_USER)
        made = Cluster(home)
        _as_postgres(
            str(BIN / "initdb"), "-D", str(made.data), "-U", OS_USER, "--auth-local=trust", "--no-sync", "-E", "UTF8"
        )
        _as_postgres("mkdir", str(made.socket_dir))
        (made.data / "pg_hba.conf").write_text(f"local all {OS_USER} trust\nlocal all all scram-sha-256\n")
        made.start()
        try:
            made.sql(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{password}'")
            yield made
        finally:
            with contextlib.suppress(subprocess.SubprocessError):
                made.stop("immediate")
    finally:
        shutil.rmtree(home, ignore_errors=True)
