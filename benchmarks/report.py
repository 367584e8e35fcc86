"""How a run reads: each row as text, the results table, the headline line and ``RESULTS.md``.

``RESULTS.md`` holds the latest run's table and its notes, then one line per
full run. How each scenario is measured stays in its module's docstring, and
what the figures mean in ``docs/performance.md``: the file copies neither.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._common import Row

__all__ = ["HISTORY", "fmt", "fmt_goal", "headline", "line", "render", "table", "write_results"]

HISTORY = "## History"
LONG = "## Long scenarios"
"""The heading of the one-line-per-full-run history; a run keeps it and may add a line."""


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "/s":
        return f"{value:,.0f}/s"
    value = round(value, 3) + 0.0  # no "-0.000"
    if unit == "MB":
        return f"{value:.3f} MB"
    if unit == "us":
        return f"{value:,.1f} us" if abs(value) < 100 else f"{value:,.0f} us"
    if unit == "records":
        return f"{value:,.0f}"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:.3f}"


def fmt_goal(row: Row) -> str:
    if row.goal is None:
        return "reported"
    kind, value = row.goal
    if kind == "floor":
        over = row.over_floor
        now = "" if over is None else f" (now {over:.2f}x)"
        return f"<= {value:g}x floor {fmt(row.floor, row.unit)}{now}"
    unit = " MB" if row.unit == "MB" else ""
    return {"ratio": f"ratio >= {value:g}", "min": f">= {value:g}", "max": f"<= {value:g}"}.get(
        kind, f"< {value:g}{unit}"
    )


def fmt_met(row: Row) -> str:
    met = row.met
    return "-" if met is None else ("yes" if met else "**no**")


def line(row: Row) -> str:
    """One row as the run prints it."""
    ratio = "" if row.ratio is None else f"  ratio {row.ratio:.2f}x"
    return (
        f"  {row.measure}: {row.who} {fmt(row.ours, row.unit)}  TorchRL {fmt(row.torchrl, row.unit)}{ratio}"
        f"  [goal {fmt_goal(row)}: {fmt_met(row).strip('*')}]"
    )


def table(rows: Sequence[Row]) -> str:
    out = [
        "| scenario | measure | ours | TorchRL | ratio | goal | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = "" if row.ratio is None else f"{row.ratio:.2f}x"
        out.append(
            f"| {row.scenario} | {row.measure} | {fmt(row.ours, row.unit)} | {fmt(row.torchrl, row.unit)} "
            f"| {ratio} | {fmt_goal(row)} | {fmt_met(row)} |"
        )
    return "\n".join(out)


def _row(rows: Sequence[Row], number: str, measure: str) -> Row | None:
    """The row of scenario ``number`` (``"7."``) whose measure starts with ``measure``."""
    return next((r for r in rows if r.scenario.startswith(number + " ") and r.measure.startswith(measure)), None)


def headline(rows: Sequence[Row]) -> str:
    """The headline figures of a run, in one line: the goals met and the ratios the goals read."""
    met = [row.met for row in rows if row.met is not None]
    parts = [f"{sum(met)} of {len(met)} goals met"]

    def ratio(label: str, row: Row | None) -> None:
        if row is not None and row.ratio is not None:
            parts.append(f"{label} {row.ratio:.2f}x TorchRL")

    def over(label: str, row: Row | None) -> None:
        if row is not None and row.over_floor is not None:
            parts.append(f"{label} {row.over_floor:.2f}x its floor")

    ratio("step()", _row(rows, "1.", "SyncMonitor(background=False)"))
    ratio("CSV", _row(rows, "2.", "CSV, in the OS"))
    over("CPU per background poll", _row(rows, "6.", "CPU per background poll"))
    over("10,000 targets' CPU", _row(rows, "7.", "process CPU share"))
    on_time = _row(rows, "7.", "share of polls within")
    if on_time is not None:
        parts.append(f"10,000 targets on time {on_time.ours:.3f}")
    log_call = next((r for r in rows if r.measure.startswith("SyncMonitor.log() calls/s")), None)
    if log_call is not None and log_call.ours > 0:
        parts.append(f"log() {1e6 / log_call.ours:.2f} us")
    cheapest = next((r for r in rows if r.measure.startswith("ours vs the cheapest peer")), None)
    if cheapest is not None and cheapest.ratio is not None:
        parts.append(f"log() {cheapest.ratio:.0f}x the cheapest peer")
    return "; ".join(parts)


def history_lines(text: str) -> list[str]:
    """The lines of the history in an existing ``RESULTS.md`` (none when it has no history)."""
    at = text.find("\n" + HISTORY + "\n")
    return [t for t in text[at:].splitlines() if t.startswith("- ")] if at >= 0 else []


def render(
    about: Sequence[str], summary: str, results: str, notes: Sequence[tuple[str, str, str]], history: Sequence[str],
    long: str = "",
) -> str:
    """``RESULTS.md``: the run's ``about`` lines (command, date, machine), its table, its notes, the history.

    ``notes`` are ``(scenario, measure, note)``, grouped under their scenario in the order given.
    """
    grouped: dict[str, list[str]] = {}
    for scenario, measure, note in notes:
        grouped.setdefault(scenario, []).append(f"- {measure}: {note}")
    notes_text = "\n\n".join(f"#### {scenario}\n\n" + "\n".join(lines) for scenario, lines in grouped.items())
    about_text = "\n".join(about)
    history_text = "\n".join(history) or "(no full run yet)"
    return f"""# Benchmark results

Written by `python -m benchmarks --write`; do not edit by hand. The latest run's table and notes
are below, then the long scenarios' (run only with `--only`), then one line per full run. How each scenario is measured is in its module's
docstring (`benchmarks/bench_*.py`); what the figures mean, in `docs/performance.md`.

## Latest run

{about_text}

Ours is monitor-async; TorchRL is `torchrl.record.loggers.monitoring.LoggerMonitor` with its
own loggers, driving the same target classes in the same run on the same machine. Ratio is
ours / TorchRL. A goal against a floor (`<= 1.1x floor ...`) holds ours to a multiple of the
same work done the plain way with no monitor, measured in the same run (see each scenario).
Every scenario ran in a fresh interpreter. {summary}

{results}

### Notes on the figures

{notes_text}

{long}{HISTORY}

One line per full run (`python -m benchmarks --write`): date, commit, headline figures. The
lines up to 8bfff35 were read off the notebook this file once kept by hand; in them, the two
background goals are read against the floors they are held to now (the bare asyncio loop, the
least-bookkeeping floor), with the plain thread they were held to then beside them.

{history_text}
"""


def write_results(
    path: Path, rows: Sequence[Row], command: str, started: dt.datetime, seconds: float,
    info: Mapping[str, str], full: bool, long: bool = False,
) -> None:
    """Writes the run to ``path``, keeping the history there and, for a ``full`` run, adding its line.

    ``long``: the run was of long scenarios only (not in a run of the whole suite); their section
    is written, and the rest of ``path`` kept. Another run keeps that section as it is.
    """
    when = started.strftime("%Y-%m-%d %H:%M %Z").strip()
    about = [
        f"- Command: `{command}` (run from the repository root)",
        f"- Date: {when}, {seconds:.0f} s in all",
        *(f"- {key}: {value}" for key, value in info.items()),
    ]
    met = [row.met for row in rows if row.met is not None]
    summary = f"{sum(met)} of {len(met)} goals met." if met else "No goals checked."
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if long:  # only the long scenarios ran: their section is replaced, the latest run and history kept
        noted = "".join(f"- {row.measure}: {row.note}\n" for row in rows if row.note)
        section = f"{LONG}\n\n" + "\n".join(about) + f"\n\n{summary}\n\n{table(rows)}\n" + (f"\n{noted}" if noted else "")
        start, end = _long_span(text)
        if start < 0:
            at = text.find("\n" + HISTORY + "\n")
            start = end = at + 1 if at >= 0 else len(text)
            section += "\n"
        path.write_text(text[:start] + section + text[end:], encoding="utf-8")
        return
    history = history_lines(text)
    if full:
        history.append(f"- {when}, {info['commit']}: {headline(rows)}")
    notes = [(row.scenario, row.measure, row.note) for row in rows if row.note]
    start, end = _long_span(text)
    kept = text[start:end] if start >= 0 else ""
    path.write_text(render(about, summary, table(rows), notes, history, kept), encoding="utf-8")


def _long_span(text: str) -> tuple[int, int]:
    """Where the long scenarios' section is in ``text`` (up to the history), or ``(-1, -1)``."""
    start = text.find("\n" + LONG + "\n")
    if start < 0:
        return -1, -1
    end = text.find("\n" + HISTORY + "\n", start)
    return start + 1, end + 1 if end >= 0 else len(text)
