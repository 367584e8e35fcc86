"""``monitor-async plot``: a PNG of a run, one panel per metric, grouped by watch (matplotlib, Agg).

matplotlib is an optional extra (``pip install "monitor-async[plot]"`` or
``pip install matplotlib``), imported only when a plot is drawn. The figure
is drawn on a ``Figure`` with the Agg canvas, never through ``pyplot``, so it
needs no display and touches no global matplotlib state.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.names import RATE
from .._core.text import eng
from .runs import Run

__all__ = ["Panel", "PlotResult", "figure", "panels", "plot_run"]

COLUMNS = 4
"""Panels per row at most."""
_PANEL_W, _PANEL_H, _HEAD_H = 4.0, 2.5, 0.5  # inches


@dataclass
class Panel:
    """One metric of one watch: its points, against step or against seconds since the run began."""

    watch: str
    metric: str
    x: list[float]
    y: list[float]
    by_step: bool

    @property
    def title(self) -> str:
        """The metric's name as shown (a rate ``x_per_second`` as ``x/s``)."""
        return self.metric[: -len(RATE)] + "/s" if self.metric.endswith(RATE) else self.metric


@dataclass
class PlotResult:
    """What :func:`plot_run` drew.

    Attributes:
        path: the PNG written.
        panels: the panels drawn.
        constant: ``"<watch>/<metric>=value"`` of the metrics left out because they never changed.
    """

    path: Path
    panels: list[Panel]
    constant: list[str] = field(default_factory=list)


def panels(run: Run, *, constant: bool = False) -> tuple[list[Panel], list[str]]:
    """The run's metrics as panels, in watch order then metric order, and the constant ones left out.

    A watch whose records carry a step is drawn against the step; any other
    against seconds since the run's first record.

    Args:
        run: the run.
        constant: also draw metrics whose value never changed (by default
            they are listed, not drawn, unless every metric is constant).

    Returns:
        ``(panels, left_out)`` where ``left_out`` holds ``"<watch>/<metric>=value"``.

    Examples:
        >>> from pathlib import Path
        >>> from monitor_async import Record
        >>> records = [Record("rb", 1, 0.0, {"rb/size": 1.0, "rb/cap": 9.0}),
        ...            Record("rb", 2, 1.0, {"rb/size": 2.0, "rb/cap": 9.0})]
        >>> found, left_out = panels(Run(Path("r"), "jsonl", [], records))
        >>> [(p.metric, p.x, p.y) for p in found], left_out
        ([('size', [1.0, 2.0], [1.0, 2.0])], ['rb/cap=9'])
    """
    t0 = run.records[0].time if run.records else 0.0
    out: list[Panel] = []
    flat: list[Panel] = []
    for name, records in run.watches().items():
        by_step = any(r.step is not None for r in records)
        series: dict[str, Panel] = {}
        cut = len(name) + 1
        for r in records:
            if by_step and r.step is None:
                continue
            x = float(r.step) if by_step and r.step is not None else r.time - t0
            for key, value in r.metrics.items():
                metric = key[cut:] if key.startswith(name + "/") else key
                panel = series.get(metric)
                if panel is None:
                    panel = series[metric] = Panel(name, metric, [], [], by_step)
                panel.x.append(x)
                panel.y.append(value)
        for panel in series.values():
            (out if constant or len(set(panel.y)) > 1 else flat).append(panel)
    if not out:
        return flat, []
    return out, [f"{p.watch}/{p.metric}={eng(p.y[0])}" for p in flat]


def _short(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _draw(ax: Any, panel: Panel, label: str, ticker: Any) -> None:
    ax.plot(panel.x, panel.y, marker="." if len(panel.x) <= 60 else None, markersize=4, linewidth=1.2)
    ax.set_title(_short(panel.title, 34), fontsize=10)
    ax.set_xlabel(label, fontsize=8)
    ax.tick_params(labelsize=8)
    whole = all(float(v).is_integer() for v in panel.y)
    ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=4, integer=panel.by_step))
    ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=5, integer=whole))
    numbers = ticker.FuncFormatter(lambda value, _: eng(value))
    ax.yaxis.set_major_formatter(numbers)
    if panel.by_step:
        ax.xaxis.set_major_formatter(numbers)
    ax.grid(True, alpha=0.3)


def figure(run: Run, *, constant: bool = False, dpi: int = 100) -> tuple[Any, list[Panel], list[str]]:
    """The matplotlib ``Figure`` of ``run`` (Agg canvas), the panels drawn and the constant metrics left out.

    Args:
        run: the run to draw; it must hold at least one record.
        constant: also draw metrics whose value never changed.
        dpi: pixels per inch (a panel is 4 x 2.5 inches).

    Returns:
        ``(figure, panels, left_out)``; see :func:`plot_run`.

    Raises:
        ImportError: matplotlib is not installed (the message says how to install it).
        ValueError: the run holds no records.
    """
    try:
        from matplotlib import ticker
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            "plotting needs matplotlib, which is not installed: pip install matplotlib (or the extra: monitor-async[plot])"
        ) from exc
    if not run.records:
        raise ValueError(f"no records in {run.path} yet: nothing to plot")
    drawn, flat = panels(run, constant=constant)
    groups: dict[str, list[Panel]] = {}
    for panel in drawn:
        groups.setdefault(panel.watch, []).append(panel)
    cols = min(COLUMNS, max(len(g) for g in groups.values()))
    rows = [math.ceil(len(g) / cols) for g in groups.values()]
    heights = [n * _PANEL_H + _HEAD_H for n in rows]
    fig = Figure(figsize=(cols * _PANEL_W, sum(heights) + 0.4), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    t0 = run.records[0].time
    fig.suptitle(
        f"{_short(run.path.name or str(run.path), 60)} · {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t0))}",
        fontsize=12, fontweight="bold",
    )
    subfigs: Sequence[Any] = list(fig.subfigures(len(groups), 1, height_ratios=heights, squeeze=False)[:, 0])
    since = f"seconds since {time.strftime('%H:%M:%S', time.localtime(t0))}"
    for sub, (name, group), n in zip(subfigs, groups.items(), rows, strict=True):
        by_step = group[0].by_step
        sub.suptitle(
            f"{_short(name, 50)}  (against {'step' if by_step else 'wall time'})",
            x=0.01, ha="left", fontsize=11, fontweight="bold",
        )
        axes = sub.subplots(n, cols, squeeze=False)
        for i, ax in enumerate(axes.flat):
            if i < len(group):
                _draw(ax, group[i], "step" if by_step else since, ticker)
            else:
                ax.set_visible(False)
    return fig, drawn, flat


def plot_run(run: Run, out: str | os.PathLike[str], *, constant: bool = False, dpi: int = 100) -> PlotResult:
    """Draws ``run`` into the PNG ``out``: a block per watch, one panel per metric.

    Guarantees: each watch's block is titled with its name and its x axis
    (step, or seconds since the run began at a clock time); each panel with
    its metric; tick labels use engineering notation (``262k``) and at most
    five ticks per axis, and matplotlib's constrained layout keeps titles,
    labels and ticks from overlapping. Metrics that never changed are left out
    (and returned) unless ``constant=True``.

    Args:
        run: the run to draw; it must hold at least one record.
        out: the PNG file to write (its folder must exist).
        constant: also draw metrics whose value never changed.
        dpi: pixels per inch of the PNG (a panel is 4 x 2.5 inches).

    Returns:
        A :class:`PlotResult`.

    Raises:
        ImportError: matplotlib is not installed (the message says how to install it).
        ValueError: the run holds no records.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from monitor_async import Record
        >>> records = [Record("rb", s, float(s), {"rb/size": s * 2.0}) for s in range(5)]
        >>> png = Path(tempfile.mkdtemp()) / "plot.png"
        >>> result = plot_run(Run(Path("r"), "jsonl", [], records), png)
        >>> png.read_bytes()[:4], len(result.panels)
        (b'\\x89PNG', 1)
    """
    fig, drawn, flat = figure(run, constant=constant, dpi=dpi)
    path = Path(out)
    fig.savefig(path, format="png")
    return PlotResult(path, drawn, flat)
