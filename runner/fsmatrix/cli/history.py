"""``fsmatrix history``: a store's series over time, their change points (Apache Otava, in a virtualenv
of its own) and what changed at each (docs/history.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from fsmatrix.backends import image
from fsmatrix.cli._common import ONLY_OPTION, RESULTS_OPTION, SINCE_OPTION, STORE_OPTION, echo_err, writable_directory
from fsmatrix.results import store
from fsmatrix.results.render import history as history_text
from fsmatrix.results.render import trends
from fsmatrix.results.store import database, otava
from fsmatrix.results.store import history as stored_history
from fsmatrix.results.store import url as store_urls
from fsmatrix.results.verdict import gate
from fsmatrix.results.verdict import history as decide


def otava_venv() -> Path:
    return image.cache_root() / otava.VENV_NAME


def _histories(
    opened: database.Store, selection: stored_history.Selection, threshold: float, otava_python: Path
) -> decide.Histories:
    """The one way history is assembled: the store's series the selection picks (on its columns), their
    change points (Otava at ``threshold``, in the interpreter ``otava_python``), the documents either
    side of a change point read (``decide.to_read``) and no other, and the verdict on them."""
    series = stored_history.load_series(opened, selection)
    version, detected = otava.detect(otava_python, [s.values for s in series], max_pvalue=threshold)
    found = [[(f.index, f.p) for f in points] for points in detected]
    documents = stored_history.documents(opened, decide.to_read(series, found))
    return decide.histories(series, found, documents, f"Apache Otava {version}")


@click.command("history")
@STORE_OPTION
@RESULTS_OPTION
@ONLY_OPTION
@SINCE_OPTION
@click.option("--metric", default=None, metavar="NAME", help="This key metric only (default: every key metric).")
@click.option(
    "--hardware-class",
    "hardware_class",
    default=None,
    metavar="CLASS",
    help="This hardware class only, as history prints it (default: every class).",
)
@click.option(
    "--group",
    default=None,
    metavar="LABEL",
    help="This comparison group only: its label as history prints it (default: every group).",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=otava.MAX_PVALUE,
    show_default=True,
    help="Otava's significance threshold: a change point's t-test p-value at most this.",
)
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@click.option(
    "--html",
    "html_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write trend pages (one per comparison group) into this directory.",
)
@click.option(
    "--fail-over",
    "fail_over",
    default=None,
    metavar="THRESHOLD",
    help="Exit 1 when a change point made its metric worse by more than THRESHOLD (e.g. 10%).",
)
@click.option("--install-otava", is_flag=True, help="Only make Otava's virtualenv (once; `make deps` does) and exit.")
def history(
    store_url: str | None,
    results_root: Path,
    only: tuple[str, ...],
    since: str | None,
    metric: str | None,
    hardware_class: str | None,
    group: str | None,
    threshold: float,
    fmt: str,
    html_dir: Path | None,
    fail_over: str | None,
    install_otava: bool,
) -> None:
    """Each cell's key metrics over time in the store, their change points and what changed at each
    (the commit, the build's settings, the cell's parameters, kernel, image, tool versions, host)."""
    if install_otava:
        click.echo(otava.ensure(otava_venv(), echo_err))
        return
    after = store.parse_since(since) if since else None  # bad input before anything is opened
    limit = gate.parse_threshold(fail_over) if fail_over is not None else None
    if html_dir is not None:
        writable_directory(html_dir, "--html")
    url = store_urls.resolve(store_url, results_root)
    selection = stored_history.Selection(only, after, metric, hardware_class, group)
    with store.open_store(url, results_root) as opened:
        found = _histories(opened, selection, threshold, otava.ensure(otava_venv(), echo_err))
    histories, detector = list(found.histories), found.detector
    if fmt == "json":
        click.echo(json.dumps(history_text.to_json(histories, detector=detector, threshold=threshold), indent=1))
    else:
        click.echo(history_text.markdown(histories, shown=url.shown, detector=detector, threshold=threshold), nl=False)
    if html_dir is not None:
        index = trends.write_pages(histories, html_dir, title=f"History of {url.shown}")
        echo_err(f"trend pages: {index.resolve()}")
    if limit is not None:
        worse = [(h, cp) for h in histories for cp in h.change_points if decide.worse_than(cp, h.series, limit)]
        if worse:
            for h, cp in worse:
                what = (
                    "stopped (durability lost)" if decide.stopped(cp, h.series) else f"worse by more than {fail_over}"
                )
                echo_err(
                    f"change point {what}: {h.series.cell_id} {h.series.metric} at {cp.time} "
                    f"{history_text.ratio_text(cp)}: {history_text.changed_text(cp)}"
                )
            raise SystemExit(1)
