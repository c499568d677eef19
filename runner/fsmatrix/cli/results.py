"""``fsmatrix results``: push to a database store, list it, merge CI artifacts into a results root,
fill a results root's store from its files. No statistics and no rendering: these start in a fraction of a second.

``fsmatrix.cli`` wires these into ``main``; they follow its conventions (UserError → exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from fsmatrix.cli._common import ONLY_OPTION, RESULTS_OPTION, SINCE_OPTION, STORE_OPTION
from fsmatrix.results import store
from fsmatrix.results.store import url as store_urls


@click.group("results")
def results_group() -> None:
    """Manage results: merge CI artifacts, fill a results root's store from its files, push to a store, list a store."""


@results_group.command("push")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@STORE_OPTION
@RESULTS_OPTION
def push_cmd(run_dirs: tuple[Path, ...], store_url: str | None, results_root: Path) -> None:
    """Store the result documents of RUN_DIRS (folders `fsmatrix run` wrote) in the store: idempotent
    (a document pushed twice is stored once), atomic per batch, safe with many pushers at once."""
    url = store_urls.resolve(store_url, results_root)
    documents = store.run_documents(list(run_dirs))  # every folder checked before anything is written
    with store.open_store(url, results_root) as opened:
        done = opened.push(documents)
    for line in done.lines(url.shown):
        click.echo(line)


@results_group.command("list")
@STORE_OPTION
@RESULTS_OPTION
@ONLY_OPTION
@SINCE_OPTION
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
def list_cmd(store_url: str | None, results_root: Path, only: tuple[str, ...], since: str | None, fmt: str) -> None:
    """What the store holds: its runs (a run id on a host, one sitting: a run id two nights share is two)."""
    after = store.parse_since(since) if since else None
    url = store_urls.resolve(store_url, results_root)
    with store.open_store(url, results_root) as opened:
        runs = store.sittings(opened.index_rows(after), only)
    total = sum(r.documents for r in runs)
    if fmt == "json":
        click.echo(json.dumps(store.listing_json(total, runs), indent=1))
    else:
        click.echo(store.listing_markdown(url.shown, total, runs), nl=False)


@results_group.command("merge")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--into",
    "root",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="The results root to merge into (created if missing).",
)
def merge_cmd(sources: tuple[Path, ...], root: Path) -> None:
    """Copy the result documents under SOURCES (e.g. downloaded shard artifacts) into one results root."""
    copied, same = store.merge(list(sources), root)
    click.echo(f"merged {copied} result documents into {root} ({same} already there)")


@results_group.command("reindex")
@click.argument("root", type=click.Path(exists=True, file_okay=False, path_type=Path))
def reindex_cmd(root: Path) -> None:
    """Add every result document under ROOT to ROOT/store.sqlite, the results root's store (those already
    there stay once; an old ROOT/index.sqlite is absorbed and removed)."""
    click.echo(f"indexed {store.reindex(root)} result documents in {root / store_urls.ROOT_STORE}")
