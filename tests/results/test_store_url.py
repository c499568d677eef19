"""Naming a store (fsmatrix.results.store.url) and reading what it holds by run (runs_stored.py): fast,
no server. The stores themselves, SQLite and a real PostgreSQL, are tests/results/test_store.py's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fsmatrix.errors import UserError
from fsmatrix.results.store import runs_stored
from fsmatrix.results.store import url as store_url

SECRET = "s3cr3t-pa55"


@pytest.mark.parametrize(
    ("text", "kind", "target"),
    [
        ("sqlite:///results/store.sqlite", "sqlite", "results/store.sqlite"),
        ("sqlite:////var/lib/fsmatrix/store.sqlite", "sqlite", "/var/lib/fsmatrix/store.sqlite"),
        ("postgresql://fsm@db:5432/fsmatrix", "postgresql", "postgresql://fsm@db:5432/fsmatrix"),
        ("postgresql://fsm@/fsmatrix?host=/run/postgresql&port=5433", "postgresql", None),
    ],
)
def test_store_urls(text: str, kind: str, target: str | None) -> None:
    url = store_url.parse(text)
    assert url.scheme == kind and url.target == (target or text) and url.shown == text


@pytest.mark.parametrize(
    "text", [f"postgresql://fsm:{SECRET}@db/fsmatrix", f"postgresql://fsm@/fsmatrix?host=/tmp/s&password={SECRET}"]
)
def test_a_password_is_shown_as_stars(text: str) -> None:
    url = store_url.parse(text)
    assert SECRET not in url.shown and "****" in url.shown and url.target == text
    assert url.hide(f"FATAL: password {SECRET} refused") == "FATAL: password **** refused"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("mysql://root@db/x", "unknown kind of store"),
        (f"mysql://root:{SECRET}@db/x", "unknown kind of store"),
        ("results/store.sqlite", "unknown kind of store"),
        ("sqlite://store.sqlite", "three slashes"),
    ],
)
def test_bad_store_urls_are_one_line_without_the_password(text: str, says: str) -> None:
    with pytest.raises(UserError, match=says) as refused:
        store_url.parse(text)
    assert SECRET not in str(refused.value) and "\n" not in str(refused.value)


def test_the_environment_variable_is_read_once_and_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_url, "_taken", [])
    assert store_url.resolve(None, Path("r")).target == "r/store.sqlite"  # neither: the default
    monkeypatch.setenv(store_url.ENV, f"postgresql://fsm:{SECRET}@db/fsmatrix")
    url = store_url.resolve(None, Path("results"))
    assert url.scheme == "postgresql" and store_url.ENV not in os.environ
    child = subprocess.run(["env"], capture_output=True, text=True, check=True).stdout
    assert SECRET not in child
    assert store_url.resolve(None, Path("r")).scheme == "postgresql"  # still this process's store
    assert store_url.resolve("sqlite:///x.sqlite", Path("r")).target == "x.sqlite"  # --store first


def test_sqlite_on_a_network_filesystem_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store_url.check_local(tmp_path / "store.sqlite")  # a local disk: fine
    monkeypatch.setattr(store_url, "filesystem_of", lambda path: "nfs4")
    with pytest.raises(UserError, match=r"network filesystem \(nfs4\)"):
        store_url.check_local(tmp_path / "store.sqlite")


def test_the_filesystem_of_a_path_is_its_longest_mount() -> None:
    assert store_url.filesystem_of(Path("/proc/self")) == "proc"
    assert store_url.filesystem_of(Path("/")) not in ("", "proc")


@pytest.mark.parametrize("text", ["yesterday", "28/11/2026", "2026-13-01"])
def test_since_must_be_a_date(text: str) -> None:
    with pytest.raises(UserError, match="--since"):
        runs_stored.parse_since(text)


def test_since_is_utc() -> None:
    assert runs_stored.parse_since("2026-11-28") == "2026-11-28T00:00:00+00:00"
    assert runs_stored.parse_since("2026-11-28T02:00+01:00") == "2026-11-28T01:00:00+00:00"


def test_a_run_id_two_nights_share_is_two_sittings() -> None:
    rows = [
        ("nightly", "h1", "a", "2026-11-26T02:00:00+00:00", "2026-11-26T02:10:00+00:00"),
        ("nightly", "h1", "b", "2026-11-26T02:10:00+00:00", "2026-11-26T02:20:00+00:00"),
        ("nightly", "h2", "a", "2026-11-26T02:05:00+00:00", "2026-11-26T02:15:00+00:00"),  # another host
        ("nightly", "h1", "a", "2026-11-27T02:00:00+00:00", "2026-11-27T02:10:00+00:00"),  # the next night
    ]
    runs = runs_stored.sittings(rows)
    assert [(r.host, r.started[:10], r.cells, r.documents) for r in runs] == [
        ("h1", "2026-11-26", 2, 2),
        ("h2", "2026-11-26", 1, 1),
        ("h1", "2026-11-27", 1, 1),
    ]
    assert [r.documents for r in runs_stored.sittings(rows, ["b"])] == [1]
    listed = runs_stored.listing_json(4, runs)
    assert listed["documents"] == 4 and set(listed["runs"][0]) == {"run_id", "host", "started", "cells", "documents"}


def test_every_command_takes_the_store_url_out_of_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI takes FSMATRIX_STORE out first thing (`fsmatrix run` without --push too): nothing it
    starts inherits a password; --push still finds the store."""
    from click.testing import CliRunner

    from fsmatrix.cli import main

    monkeypatch.setenv(store_url.ENV, f"postgresql://fsm:{SECRET}@db/fsmatrix")
    monkeypatch.setattr(store_url, "_taken", [])
    assert CliRunner().invoke(main, ["matrix", "settings"]).exit_code == 0
    assert store_url.ENV not in os.environ
    assert SECRET not in subprocess.run(["env"], capture_output=True, text=True, check=True).stdout
    assert store_url.resolve(None, Path("r")).target.endswith("@db/fsmatrix")
