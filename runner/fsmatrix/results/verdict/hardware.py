"""Hardware classes: which results come from like machines, so a table never sets one beside another.

A matrix fanned out over a fleet (GitHub runners, a Slurm cluster) runs each shard wherever it is
scheduled. Every result records the machine under its run (``provenance.host``,
backends/hostinfo.py); its *hardware class* is what of that changes the numbers and is the same on
two identical machines: the CPU model and count, the memory (whole GiB: identical machines report a
few MiB apart) and the disk under the work directory (its model, rotational or not). The machine id
and the kernel are left out: two machines of one class are alike, and ``compare`` and the report's
environment section still name every difference.

The report (render/markdown.py, render/page.py) and the answer (configurations.py) split cells by class when the
results hold more than one: each table and each comparison holds one class's runs, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fsmatrix.results.store import UNKNOWN_HOST, Result, hardware_class

UNKNOWN = UNKNOWN_HOST
of = hardware_class


def classes(docs: Sequence[Result]) -> list[str]:
    """The classes of these results, sorted (a report names them in the same order however its
    documents were read)."""
    return sorted({of(d) for d in docs})


def split(cells: Mapping[str, Sequence[Result]]) -> dict[str, dict[str, list[Result]]]:
    """Cells (id -> its runs) by hardware class, in order of first appearance: class -> id -> the runs
    of that cell on that class (a cell whose runs came from two classes is in both)."""
    out: dict[str, dict[str, list[Result]]] = {}
    for cell_id, docs in cells.items():
        for doc in docs:
            out.setdefault(of(doc), {}).setdefault(cell_id, []).append(doc)
    return out


def why(found: Sequence[str]) -> str:
    """The sentence a report prints where it splits by class."""
    listed = "; ".join(f"{i}. {name}" for i, name in enumerate(found, 1))
    return (
        f"These runs come from {len(found)} hardware classes ({listed}): numbers measured on different "
        "hardware are not comparable, so each table and each comparison holds one class's runs "
        "(docs/ci.md, 'Runner classes')."
    )
