"""``python3 -m fsmatrix.agent --version``: which agent an image carries."""

from __future__ import annotations

import argparse
import sys

from fsmatrix import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m fsmatrix.agent",
        description="The fsmatrix guest agent. Job mode: python3 -m fsmatrix.agent.guest JOB_DIR.",
    )
    parser.add_argument("--version", action="version", version=f"fsmatrix {__version__}")
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
