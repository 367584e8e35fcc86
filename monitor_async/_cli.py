"""The ``monitor-async`` command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import __version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="monitor-async", description="Watch stats() and stream metrics.")
    parser.add_argument("--version", action="version", version=f"monitor-async {__version__}")
    parser.parse_args(argv)
    parser.print_help()
    return 0
