"""Reading a matrix or settings file: YAML with line numbers, within the size limits, one clear error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fsmatrix.errors import UserError
from fsmatrix.matrix import yamlpos

MAX_FILE_BYTES = 1 << 20


def read_file(path: str | Path, what: str) -> Any:
    """A YAML file (``what``: a matrix file, a settings file), parsed with line numbers and within the size limits."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {what}: {exc.strerror}", file=name) from exc
    if len(raw) > MAX_FILE_BYTES:
        raise UserError(f"{len(raw)} bytes; {what} may have at most {MAX_FILE_BYTES}", file=name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = raw[: exc.start].count(b"\n") + 1
        message = f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8"
        raise UserError(message, file=name, line=bad_line) from exc
    try:
        return yamlpos.load(text, max_nodes=yamlpos.MAX_NODES)
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise UserError(f"not valid YAML: {exc.problem}", file=name, line=line) from exc
    except yaml.YAMLError as exc:
        raise UserError(f"not valid YAML: {exc}", file=name) from exc
    except RecursionError as exc:
        raise UserError(f"not usable as {what}: nested too deeply", file=name) from exc
