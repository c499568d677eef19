"""Where a database store is: ``--store URL``, else ``FSMATRIX_STORE``, else SQLite under the results root.

- ``sqlite:///PATH`` — embedded, nothing to start (``sqlite:///results/store.sqlite`` relative to the
  current directory; ``sqlite:////var/lib/fsmatrix/store.sqlite`` absolute). Refused on a network
  filesystem: SQLite's locking is not reliable there.
- ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB`` and every form libpq reads
  (``postgresql://USER@/DB?host=/socket/dir&port=N``): handed to psycopg 3 as it is, so ``PGPASSFILE``
  and ``PGPASSWORD`` work as in every PostgreSQL tool.

A password is never shown: ``StoreURL.shown`` is the URL with it as ``****``, and ``FSMATRIX_STORE`` is
taken out of this process's environment once read, so no child process (a VM, an agent, a database
server) inherits it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from fsmatrix.errors import UserError

ENV = "FSMATRIX_STORE"
ROOT_STORE = "store.sqlite"  # a results root's own store, its one SQLite (root_store.py)
SCHEMES = ("sqlite", "postgresql", "postgres")
# Filesystems whose locking SQLite cannot trust (its documentation: "SQLite over a network").
NETWORK_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "fuse.sshfs", "glusterfs", "ceph", "afs", "lustre", "fuse.gcsfuse"}
)
MASK = "****"


@dataclass(frozen=True)
class StoreURL:
    scheme: str  # "sqlite" or "postgresql"
    target: str  # a path for sqlite; the URL as libpq reads it for postgresql (with its password)
    shown: str  # for people, logs and errors: the password as ****
    secrets: tuple[str, ...] = ()  # what must never be printed (the password)

    @property
    def path(self) -> Path:
        return Path(self.target)

    def hide(self, text: str) -> str:
        """``text`` with every secret of this URL masked (an error message from a driver, say)."""
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return text


def _mask(url: str) -> tuple[str, tuple[str, ...]]:
    parts = urlsplit(url)
    secrets = []
    netloc = parts.netloc
    if parts.password:
        secrets += [parts.password, unquote(parts.password)]  # as written, and as libpq reads it
        user, _, host = netloc.rpartition("@")
        name = user.partition(":")[0]
        netloc = f"{name}:{MASK}@{host}"
    shown_query = []
    for item in parts.query.split("&") if parts.query else []:
        key, eq, value = item.partition("=")
        if unquote(key) == "password":
            secrets += [value, unquote(value)]
            item = f"{key}{eq}{MASK}"
        shown_query.append(item)
    # not urlunsplit: it drops an empty host's "//" (postgresql:///db) and would percent-encode the mask
    shown = f"{parts.scheme}://{netloc}{parts.path}" + (f"?{'&'.join(shown_query)}" if parts.query else "")
    shown += f"#{parts.fragment}" if parts.fragment else ""
    return shown, tuple(s for s in secrets if s)


def parse(text: str) -> StoreURL:
    """A store URL; UserError (one line, no password) when it is not one."""
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in SCHEMES:
        # not a URL: libpq's key=value form, say; its password masked whichever way it is written
        shown = _mask(text)[0] if sep else re.sub(r":[^@/]*@", f":{MASK}@", text)
        shown = re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)", rf"\g<1>{MASK}", shown)
        raise UserError(
            f"store {shown!r}: unknown kind of store; expected sqlite:///PATH or "
            "postgresql://USER[:PASSWORD]@HOST[:PORT]/DB (or libpq's forms)"
        )
    if scheme == "sqlite":
        if not rest.startswith("/") or rest == "/":
            raise UserError(f"store {text!r}: expected sqlite:///PATH (three slashes; four for an absolute path)")
        return StoreURL("sqlite", rest[1:], text)
    shown, secrets = _mask(text)
    return StoreURL("postgresql", text, shown, secrets)


_taken: list[str] = []  # FSMATRIX_STORE as this process found it, once taken out of its environment


def take_from_environment() -> None:
    """Take ``FSMATRIX_STORE`` out of this process's environment (keeping it for ``resolve``): the
    CLI does so first thing, so no child it starts (a VM, an agent, a database server) inherits a
    password."""
    value = os.environ.pop(ENV, None)
    if value is not None:
        _taken[:] = [value]


def resolve(option: str | None, results_root: Path) -> StoreURL:
    """``--store``, else ``FSMATRIX_STORE`` (taken out of the environment), else SQLite at
    ``RESULTS/store.sqlite``."""
    take_from_environment()
    text = option or next(iter(_taken), None) or f"sqlite:///{results_root / ROOT_STORE}"
    return parse(text)


def filesystem_of(path: Path) -> str:
    """The type of the filesystem ``path`` lies on (the longest mount point above it)."""
    best, fstype = "", ""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return ""
    target = str(path.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, fstype = point, fields[2]
    return fstype


def network_filesystem(path: Path) -> str | None:
    """The network filesystem an SQLite file at ``path`` would be on (``nfs4``), or None."""
    fstype = filesystem_of(path.parent if path.parent.exists() else Path.cwd())
    return fstype if fstype in NETWORK_FILESYSTEMS else None


def check_local(path: Path) -> None:
    """Refuse an SQLite store on a network filesystem (one line)."""
    fstype = network_filesystem(path)
    if fstype is not None:
        raise UserError(
            f"store sqlite:///{path}: on a network filesystem ({fstype}), where SQLite's locks are not "
            "reliable; put it on a local disk or use a PostgreSQL store"
        )
