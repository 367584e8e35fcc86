"""The ``monitor-async`` command line: ``demo``, and ``show | plot | tail | export`` to look at runs."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fnmatch
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import __version__
from .._core.exceptions import RunNotFoundError
from .._core.text import count

RUN_HELP = "a run's folder (holding the metrics.jsonl or metrics.csv the sinks wrote), or one such file"


def _metric_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metric", action="append", metavar="GLOB",
        help="only metrics matching GLOB, as <watch>/<metric> or <metric> (e.g. 'collector/*', '*loss*'); "
        "repeat for more",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monitor-async",
        description="Watch stats() snapshots of training and serving systems and stream them to "
        "CSV, JSONL, TensorBoard, wandb, the console and Prometheus; look at the runs it wrote.",
    )
    parser.add_argument("--version", action="version", version=f"monitor-async {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run a simulated RL training, monitored into CSV, JSONL and TensorBoard files",
        description="Runs a simulated RL system (collector thread, replay buffer, learner, async "
        "inference server) for a few seconds and monitors it into LOGDIR/<timestamp>/.",
    )
    demo.add_argument("--seconds", type=float, default=15.0, help="how long to run (default: 15)")
    demo.add_argument("--logdir", default="./runs", help="where to write the run (default: ./runs)")
    demo.add_argument("--no-console", action="store_true", help="do not show the live console table")

    show = commands.add_parser(
        "show", help="print a run: watches, metrics, records, time span, first and last values, rates",
        description="Prints a run: its watches, metrics, records and time span, and per metric its first "
        "and last value and last rate.",
    )
    show.add_argument("run", metavar="RUN", help=RUN_HELP)
    _metric_option(show)

    plot = commands.add_parser(
        "plot", help="draw a run into a PNG, one panel per metric (needs matplotlib)",
        description="Draws a run into a PNG: a block per watch, one panel per metric, against the watch's "
        "step when it has one, else wall time. Metrics that never changed are listed, not drawn. "
        "Needs matplotlib (pip install matplotlib).",
    )
    plot.add_argument("run", metavar="RUN", help=RUN_HELP)
    plot.add_argument("-o", "--output", metavar="FILE.png", help="the PNG to write (default: RUN/plot.png)")
    _metric_option(plot)
    plot.add_argument("--all", action="store_true", help="also draw metrics that never changed")

    tail = commands.add_parser(
        "tail", help="follow a run another process is writing, as a live table (Ctrl-C to quit)",
        description="Follows a run as its files grow and shows the console sink's table (one line per "
        "record when the output is not a terminal). Ctrl-C quits.",
    )
    tail.add_argument("run", metavar="RUN", help=RUN_HELP)
    tail.add_argument("--interval", type=float, default=0.5, help="seconds between reads (default: 0.5)")

    export = commands.add_parser(
        "export", help="write a run as a wide CSV: one row per (watch, step or time), one column per metric",
        description="Writes a run as a wide CSV for pandas and spreadsheets: columns watch, step, time, then "
        "one column per metric (<watch>/<metric>); one row per watch and step (per watch and time for a "
        "watch without a step).",
    )
    export.add_argument("run", metavar="RUN", help=RUN_HELP)
    export.add_argument("--wide", required=True, metavar="OUT.csv", help="the CSV file to write ('-': stdout)")
    _metric_option(export)
    return parser


def _keep(globs: Sequence[str]) -> Callable[[str, str], bool]:
    def keep(watch: str, key: str) -> bool:
        metric = key[len(watch) + 1 :] if key.startswith(watch + "/") else key
        return any(fnmatch.fnmatchcase(key, g) or fnmatch.fnmatchcase(metric, g) for g in globs)

    return keep


def _run(args: argparse.Namespace) -> int:
    from .runs import load_run

    run = load_run(args.run)
    if args.metric:
        selected = run.select(_keep(args.metric))
        if run.records and not selected.records:
            print(f"monitor-async {args.command}: no metric of {args.run} matches {' '.join(args.metric)}",
                  file=sys.stderr)
            return 1
        run = selected
    if args.command == "show":
        from .show import describe

        print("\n".join(describe(run)))
        return 0
    if args.command == "export":
        from .export import write_wide

        if args.wide == "-":
            rows = write_wide(run.records, sys.stdout)
        else:
            with open(args.wide, "w", newline="", encoding="utf-8") as out:
                rows = write_wide(run.records, out)
            print(f"wrote {args.wide}: {count(rows, 'row')} of {count(len(run.watches()), 'watch')}")
        return 0
    from .plot import plot_run

    output = Path(args.output) if args.output else (run.path if run.path.is_dir() else run.path.parent) / "plot.png"
    try:
        result = plot_run(run, output, constant=args.all)
    except ImportError as exc:
        print(f"monitor-async plot: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"monitor-async plot: {exc}", file=sys.stderr)
        return 1
    watches = len({p.watch for p in result.panels})
    print(f"wrote {result.path}: {count(len(result.panels), 'panel')} of {count(watches, 'watch')}")
    if result.constant:
        print(f"not drawn, never changed (--all draws them): {', '.join(result.constant)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    Args:
        argv: the arguments after the program name.

    Returns:
        0 on success; 1 when the run is missing or unreadable (with a message
        on stderr); 2 for a usage error; 130 for a demo ended by Ctrl-C.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            if not args.seconds > 0:
                parser.error("--seconds must be a positive number")
            from .demo import main as demo

            return demo(args.seconds, args.logdir, console=not args.no_console)
        if args.command == "tail":
            if not args.interval > 0:
                parser.error("--interval must be a positive number")
            from .tail import tail

            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how tail ends; the table stays on screen
                asyncio.run(tail(args.run, interval=args.interval))
            return 0
        if args.command in ("show", "plot", "export"):
            return _run(args)
    except RunNotFoundError as exc:
        print(f"monitor-async {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `monitor-async show RUN | head`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 1
    parser.print_help()
    return 0
