"""The ``monitor-async`` command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monitor-async",
        description="Watch stats() snapshots of training and serving systems and stream them to "
        "CSV, JSONL, TensorBoard, wandb, the console and Prometheus.",
    )
    parser.add_argument("--version", action="version", version=f"monitor-async {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run a simulated RL training, monitored into CSV, JSONL and TensorBoard files",
        description="Runs a simulated RL system (collector thread, replay buffer, learner, async "
        "inference server) for a few seconds and monitors it into DIR/<timestamp>/.",
    )
    demo.add_argument("--seconds", type=float, default=15.0, help="how long to run (default: 15)")
    demo.add_argument("--logdir", default="./runs", help="where to write the run (default: ./runs)")
    demo.add_argument("--no-console", action="store_true", help="do not show the live console table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        if not args.seconds > 0:
            parser.error("--seconds must be a positive number")
        from ._demo import main as demo

        return demo(args.seconds, args.logdir, console=not args.no_console)
    parser.print_help()
    return 0
