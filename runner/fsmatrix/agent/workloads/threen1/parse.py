"""The parent's output (``parse_output``), read here only: each worker's counts, the result, what
the database holds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Worker:
    """One worker's own counts, as it recorded them at its end."""

    id: int
    pid: int
    reads: int
    updates: int
    longest: int
    largest: int
    cpu_s: float
    start_s: float  # when it began work, after the parent released the workers
    end_s: float
    tp: int  # per-sequence TP transactions it committed
    tp_result: int  # ... that set ^result
    tp_highest: int  # ... that set ^highest
    tp_rw: int  # ... that set either (the others were read-only)


@dataclass(frozen=True)
class Shared:
    """What the database holds at the end: ^result, ^highest, ^reads, ^updates."""

    longest: int
    largest: int
    reads: int
    updates: int


@dataclass(frozen=True)
class RunOutput:
    workers: list[Worker]
    elapsed_s: float
    reads: int  # the sums of the workers' own counts
    updates: int
    longest: int
    largest: int
    start_skew_s: float  # how long after the release the last worker began
    shared: Shared


def line_fields(line: str) -> dict[str, int]:
    """The ``key=integer`` fields after a report line's first word (``worker``, ``result``, ``survey``, ...)."""
    fields = {}
    for item in line.split()[1:]:
        key, sep, value = item.partition("=")
        if not sep or not value.lstrip("-").isdigit():
            raise ValueError(f"threen1 output: cannot read {item!r} in {line!r}")
        fields[key] = int(value)
    return fields


def parse_output(text: str) -> RunOutput:
    """The parent's report: ``worker id=.. pid=..`` lines, one ``result ..`` and one ``shared ..`` line."""
    workers = []
    result: dict[str, int] | None = None
    shared: dict[str, int] | None = None
    errors = []
    for line in text.splitlines():
        if line.startswith("worker "):
            f = line_fields(line)
            workers.append(
                Worker(
                    id=f["id"],
                    pid=f["pid"],
                    reads=f["reads"],
                    updates=f["updates"],
                    longest=f["longest"],
                    largest=f["largest"],
                    cpu_s=f["cpu_cs"] / 100,
                    start_s=f["start_us"] / 1e6,
                    end_s=f["end_us"] / 1e6,
                    tp=f["tp"],
                    tp_result=f["tp_result"],
                    tp_highest=f["tp_highest"],
                    tp_rw=f["tp_rw"],
                )
            )
        elif line.startswith("result "):
            result = line_fields(line)
        elif line.startswith("shared "):
            shared = line_fields(line)
        elif line.startswith("%"):
            errors.append(line.strip())
    if result is None or shared is None:
        what = "result" if result is None else "shared"
        raise ValueError(f"threen1 output has no {what} line" + (": " + "; ".join(errors) if errors else ""))
    return RunOutput(
        workers=workers,
        elapsed_s=result["elapsed_us"] / 1e6,
        reads=result["reads"],
        updates=result["updates"],
        longest=result["longest"],
        largest=result["largest"],
        start_skew_s=result["start_skew_us"] / 1e6,
        shared=Shared(
            longest=shared["longest"], largest=shared["largest"], reads=shared["reads"], updates=shared["updates"]
        ),
    )
