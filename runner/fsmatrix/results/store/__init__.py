"""The store: where result documents live and how they are found — run folders, a results root's
store (its one SQLite), merging CI shards, a side of a comparison. Documents enter here and nowhere else.

Layout under a results root::

    <root>/store.sqlite                       its store: every document, by column (fillable from the files)
    <root>/<run-id>/matrix.json               the expanded matrix this run was made from
    <root>/<run-id>/<cell-id>/r<N>.json       one result document per repeat
    <root>/<run-id>/<cell-id>/r<N>.log        the agent's log for that repeat
    <root>/<run-id>/report.md                 the report written at the end of `fsmatrix run`
"""

from fsmatrix.results.store.document import (
    DIRECTIONS,
    UNKNOWN_HOST,
    Result,
    comparison_group,
    document_problem,
    dotted,
    hardware_class,
)
from fsmatrix.results.store.files import (
    COMPLETE,
    RACE_FILE,
    is_complete,
    iter_result_files,
    load_document,
    load_results,
    result_path,
)
from fsmatrix.results.store.merge import merge
from fsmatrix.results.store.published import DEFAULT_DIR as PUBLISHED_DIR
from fsmatrix.results.store.published import load as load_published
from fsmatrix.results.store.published import reproduced
from fsmatrix.results.store.records import (
    MatrixEntry,
    Race,
    RunMatrix,
    RunOrder,
    load_race,
    load_run_matrix,
    run_matrix,
)
from fsmatrix.results.store.root_store import RootStore, open_root, open_store, reindex
from fsmatrix.results.store.run_records import RunRecords, load_run_records
from fsmatrix.results.store.runs_stored import listing_json, listing_markdown, parse_since, run_documents, sittings

__all__ = [
    "COMPLETE",
    "DIRECTIONS",
    "PUBLISHED_DIR",
    "RACE_FILE",
    "UNKNOWN_HOST",
    "MatrixEntry",
    "Race",
    "Result",
    "RootStore",
    "RunMatrix",
    "RunOrder",
    "RunRecords",
    "comparison_group",
    "document_problem",
    "dotted",
    "hardware_class",
    "is_complete",
    "iter_result_files",
    "listing_json",
    "listing_markdown",
    "load_document",
    "load_published",
    "load_race",
    "load_results",
    "load_run_matrix",
    "load_run_records",
    "merge",
    "open_root",
    "open_store",
    "parse_since",
    "reindex",
    "reproduced",
    "result_path",
    "run_documents",
    "run_matrix",
    "sittings",
]
