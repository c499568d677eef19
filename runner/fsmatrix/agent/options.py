"""What a cell's ``mkfs_options`` and ``mount_options`` may contain: options, nothing else.

They reach mkfs and mount as arguments, after every device check: a device path (``-J
device=/dev/sdb``, ``logdev=/dev/sdb``), a positional argument (``-q sdb``: mke2fs would take
``sdb`` as the device) or a force flag (``-F -F`` makes mke2fs format a mounted device) would go
around those checks. So each mkfs option is parsed the way the tool's own getopt does, and refused
when it is unknown to the tool, a positional argument, a force flag, or holds anything but letters,
digits and ``^=,._:+%@-`` (no ``/``, no spaces, no shell text). Long options take their value with
``=``. The filesystem's own defaults (``-F``, ``-f``: overwrite an old signature on a device that
passed the checks) are fsmatrix's, not the cell's, and stay.
"""

from __future__ import annotations

import re

FORCE_FLAGS = ("f", "F")  # in every tool above: overwrite / go on regardless
FORCE_LONG = ("--force",)
SAFE_TEXT = re.compile(r"[A-Za-z0-9 ^=,._:+%@-]*")
MOUNT_OPTION = re.compile(r"[A-Za-z0-9_]+(=[A-Za-z0-9^,._:+%@-]*)?")

MKFS_ALLOWED = (
    "options only, e.g. '-O ^has_journal -m 0 -E stride=16' or '-i size=512' or '--csum=xxhash': "
    "letters, digits and ^=,._:+%@- (no paths, quotes or shell text), no positional arguments, no -f/-F/--force"
)
MOUNT_ALLOWED = "a comma-separated list of NAME or NAME=VALUE, e.g. 'noatime,data=writeback' (no paths, no spaces)"


def _getopt_values(spec: str) -> tuple[set[str], set[str]]:
    """(letters that take a value, letters that do not) of a getopt string."""
    takes: set[str] = set()
    plain: set[str] = set()
    for i, letter in enumerate(spec):
        if letter == ":":
            continue
        (takes if spec[i + 1 : i + 2] == ":" else plain).add(letter)
    return takes, plain


def check_mkfs_options(tool: str, spec: str, text: str) -> None:
    """Raise ValueError (naming the bad part) unless ``text`` is options of mkfs tool ``tool``,
    whose getopt string is ``spec`` (the filesystem declares it: Filesystem.mkfs_getopt)."""
    if not text.strip():
        return
    bad = next((c for c in text if not SAFE_TEXT.fullmatch(c)), None)
    if bad is not None:
        raise ValueError(f"{bad!r} is not allowed")
    if not spec:
        raise ValueError(f"fsmatrix does not know the options of {tool}")
    takes, plain = _getopt_values(spec)
    tokens = text.split()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token.startswith("--"):
            if token.split("=", 1)[0] in FORCE_LONG:
                raise ValueError(f"{token!r} is a force flag")
            if len(token) == 2:
                raise ValueError("'--' would end the options")
            continue  # long options carry their value after '=': a next bare word is positional
        if not token.startswith("-") or token == "-":
            raise ValueError(f"{token!r} is a positional argument, not an option")
        for j, letter in enumerate(token[1:], start=1):
            if letter in FORCE_FLAGS and letter in plain:
                raise ValueError(f"{token!r}: -{letter} is a force flag")
            if letter in takes:
                if j + 1 == len(token):  # the value is the next word
                    if i == len(tokens):
                        raise ValueError(f"{token!r} needs a value")
                    if tokens[i].startswith("-") and not re.fullmatch(r"-\d+", tokens[i]):
                        raise ValueError(f"{token!r} needs a value, got the option {tokens[i]!r}")
                    i += 1
                break  # the rest of the word is the value
            if letter not in plain:
                raise ValueError(f"{token!r}: -{letter} is not an option of {tool}")


def check_mount_options(text: str) -> None:
    """Raise ValueError unless ``text`` is a comma-separated list of mount options (no paths)."""
    for option in (o.strip() for o in text.split(",")):
        if option and not MOUNT_OPTION.fullmatch(option):
            raise ValueError(f"{option!r} is not a mount option")
