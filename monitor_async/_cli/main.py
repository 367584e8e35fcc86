"""The ``monitor-async`` command line: ``demo``, and ``show | plot | tail | export | alerts`` to look at runs."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fnmatch
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from .._core.exceptions import RunNotFoundError
from .._core.text import count

if TYPE_CHECKING:
    from .runs import Run

Handler = Callable[[argparse.Namespace, argparse.ArgumentParser], int]
"""What a command runs: its parsed arguments and the parser (for usage errors) give its exit code."""

RUN_HELP = (
    "a run's folder (the metrics.jsonl or metrics.csv the sinks wrote, a TorchRL CSVLogger folder, "
    "TensorBoard event files), or one such file"
)


def _metric_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metric", action="append", metavar="GLOB",
        help="only metrics matching GLOB, as <watch>/<metric> or <metric> (e.g. 'collector/*', '*loss*'); "
        "repeat for more",
    )


def _launches_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--launches", choices=("run", "all"), default="run",
        help="run (default): a launch resumed from a checkpoint continues the launch it resumes, whose records "
        "after the checkpoint are left out (superseded); all: every record, each launch apart",
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
    demo.add_argument(
        "--stall", action="store_true",
        help="make the collector stop producing frames part way, to see the alert it raises",
    )

    _run_commands(commands)
    demo.set_defaults(handler=_demo)
    return parser


def _run_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands that read a run: show, plot, tail, export, alerts."""
    show = commands.add_parser(
        "show", help="print a run: watches, metrics, records, time span, first and last values, rates",
        description="Prints a run: its watches, metrics, records and time span, and per metric its first "
        "and last value and last rate.",
    )
    show.add_argument("run", metavar="RUN", help=RUN_HELP)
    _metric_option(show)
    _launches_option(show)

    plot = commands.add_parser(
        "plot", help="draw a run into a PNG, one panel per metric (needs matplotlib)",
        description="Draws a run into a PNG: a block per watch, one panel per metric, against the watch's "
        "step when it has one, else wall time. Metrics that never changed are listed, not drawn. "
        "Needs matplotlib (pip install matplotlib).",
    )
    plot.add_argument("run", metavar="RUN", help=RUN_HELP)
    plot.add_argument("-o", "--output", metavar="FILE.png", help="the PNG to write (default: RUN/plot.png)")
    _metric_option(plot)
    _launches_option(plot)
    plot.add_argument("--all", action="store_true",
                      help="also draw metrics that never changed and the monitor's own counters")
    plot.add_argument("--monitor", action="store_true",
                      help="also draw the monitor's own counters (the watch 'monitor')")
    plot.add_argument("--per-page", type=int, default=32, metavar="N",
                      help="panels per PNG at most (default: 32); more go to FILE-2.png, FILE-3.png...")
    plot.add_argument("--max-pages", type=int, default=8, metavar="N",
                      help="PNGs written at most (default: 8); the panels beyond are named, not drawn")

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
    _launches_option(export)

    alerts = commands.add_parser(
        "alerts", help="list a run's alert events: firing, resolved, and how long each fired",
        description="Lists the alert events JSONLSink wrote into a run: one line per episode, from firing "
        "to resolved (with its duration), or still firing.",
    )
    alerts.add_argument("run", metavar="RUN", help=RUN_HELP)
    for sub, handler in ((show, _show), (plot, _plot), (tail, _tail), (export, _export), (alerts, _alerts)):
        sub.set_defaults(handler=handler)


def _writable(path: str) -> None:
    """Raises ``OSError`` naming ``path`` when its folder does not exist or it names a folder."""
    target = Path(path)
    if not target.parent.is_dir():
        raise OSError(f"cannot write {path}: the folder {target.parent} does not exist")
    if target.is_dir():
        raise OSError(f"cannot write {path}: it is a folder")


def _keep(globs: Sequence[str]) -> Callable[[str, str], bool]:
    def keep(watch: str, key: str) -> bool:
        metric = key[len(watch) + 1 :] if key.startswith(watch + "/") else key
        return any(fnmatch.fnmatchcase(key, g) or fnmatch.fnmatchcase(metric, g) for g in globs)

    return keep


def _load(args: argparse.Namespace) -> Run | None:
    """The run ``args.run`` names, its metrics picked by ``--metric``; None (said on stderr) when none matches."""
    from .runs import load_run

    run = load_run(args.run).with_launches(getattr(args, "launches", "run"))
    if getattr(args, "metric", None):
        selected = run.select(_keep(args.metric))
        if next(run.iter_records(), None) is not None and next(selected.iter_records(), None) is None:
            print(f"monitor-async {args.command}: no metric of {args.run} matches {' '.join(args.metric)}",
                  file=sys.stderr)
            return None
        run = selected
    return run


def _demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if not args.seconds > 0:
        parser.error("--seconds must be a positive number")
    from .demo import main as demo

    return demo(args.seconds, args.logdir, console=not args.no_console, stall=args.stall)


def _tail(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if not args.interval > 0:
        parser.error("--interval must be a positive number")
    from .tail import tail

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how tail ends; the table stays on screen
        asyncio.run(tail(args.run, interval=args.interval))
    return 0


def _show(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .show import describe

    run = _load(args)
    if run is None:
        return 1
    print("\n".join(describe(run)))
    return 0


def _alerts(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .show import Summary, alert_line, episodes

    run = _load(args)
    if run is None:
        return 1
    found = episodes(Summary.of(run).alerts)
    if not found:
        print(f"no alert events in {run.path}")
    for firing, resolved in found:
        print(alert_line(firing, resolved))
    return 0


def _export(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .export import write_wide

    run = _load(args)
    if run is None:
        return 1
    if args.wide == "-":
        write_wide(run, sys.stdout)
        return 0
    _writable(args.wide)
    names: set[str] = set()
    with open(args.wide, "w", newline="", encoding="utf-8") as out:
        rows = write_wide(run, out, watches=names)
    print(f"wrote {args.wide}: {count(rows, 'row')} of {count(len(names), 'watch')}")
    return 0


def _plot(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if not (args.per_page >= 1 and args.max_pages >= 1):
        parser.error("--per-page and --max-pages must be at least 1")
    from .plot import plot_run

    run = _load(args)
    if run is None:
        return 1
    output = Path(args.output) if args.output else (run.path if run.path.is_dir() else run.path.parent) / "plot.png"
    _writable(str(output))
    try:
        result = plot_run(run, output, constant=args.all, monitor=args.all or args.monitor,
                          per_page=args.per_page, max_pages=args.max_pages)
    except (ImportError, ValueError) as exc:
        print(f"monitor-async plot: {exc}", file=sys.stderr)
        return 1
    watches = len({p.watch for p in result.panels})
    where = str(result.path) if len(result.paths) == 1 else (
        f"{result.paths[0]} … {result.paths[-1].name} ({len(result.paths)} pages)")
    print(f"wrote {where}: {count(len(result.panels), 'panel')} of {count(watches, 'watch')}")
    if result.constant:
        print(f"not drawn, never changed (--all draws them): {', '.join(result.constant)}")
    if result.monitor:
        print(f"not drawn: the monitor's own counters ({count(result.monitor, 'metric')}; --monitor draws them)")
    if result.beyond:
        print(f"not drawn, past page {len(result.paths)} ({count(len(result.beyond), 'panel')}; --metric picks "
              f"others, --max-pages draws more): {', '.join(result.beyond[:10])}"
              + (" …" if len(result.beyond) > 10 else ""))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    Args:
        argv: the arguments after the program name.

    Returns:
        0 on success; 1 when the run is missing (with a message on stderr); 2
        for a usage error, a run that cannot be read or an output that cannot
        be written (one line naming the path); 130 for a demo ended by Ctrl-C.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0
    try:
        return handler(args, parser)
    except RunNotFoundError as exc:
        print(f"monitor-async {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `monitor-async show RUN | head`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 1
    except OSError as exc:  # unreadable run, unwritable output: one line naming the path
        text = exc.strerror if exc.filename is None and exc.strerror else str(exc)
        if exc.filename is not None:
            text = f"cannot use {exc.filename}: {exc.strerror or exc}"
        print(f"monitor-async {args.command}: {text or exc}", file=sys.stderr)
        return 2
