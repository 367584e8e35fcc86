"""``monitor-async plot``: a PNG of a run, one panel per metric, grouped by watch.

matplotlib (the ``[plot]`` extra) is imported only when a plot is drawn, on
a ``Figure`` with the Agg canvas, never ``pyplot``: no display, no global state.
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.names import RATE
from .._core.record import Record
from .._core.text import clock, eng
from .runs import Launch, Run
from .show import MONITOR, episodes

__all__ = ["MAX_PAGES", "PER_PAGE", "Panel", "PlotResult", "figure", "panels", "plot_run"]

COLUMNS = 4
"""Panels per row at most."""
_PANEL_W, _PANEL_H, _HEAD_H = 4.0, 2.5, 0.5  # inches


MAX_POINTS = 4000
"""Points a panel keeps at most: past it, every other point goes (evenly thinned, first and last kept)."""
PER_PAGE = 32
"""Panels per PNG at most (8 rows of 4): a run with more is drawn on several pages."""
MAX_PAGES = 8
"""Pages drawn at most; the panels beyond them are named, not drawn (``--metric`` picks others)."""


@dataclass
class Panel:
    """One metric of one watch: its points against step or seconds since the run began.

    ``breaks``: indexes where a new launch begins (the line is drawn apart); ``times``: each point's wall time.
    """

    watch: str
    metric: str
    x: list[float]
    y: list[float]
    by_step: bool
    times: list[float] = field(default_factory=list)
    breaks: list[int] = field(default_factory=list)
    launches: list[int] = field(default_factory=list)
    stride: int = 1
    seen: int = 0
    low: list[float] | None = None
    high: list[float] | None = None
    band: str = ""
    """A distribution's panel: ``y`` its median, ``low``/``high`` the band drawn around it, ``band`` what they are."""

    @property
    def title(self) -> str:
        """The metric's name as shown (a rate ``x_per_second`` as ``x/s``; a distribution with its band)."""
        if self.band:
            return f"{self.metric} ({self.band})"
        return self.metric[: -len(RATE)] + "/s" if self.metric.endswith(RATE) else self.metric

    @property
    def key(self) -> str:
        """The full key, ``"<watch>/<metric>"``."""
        return f"{self.watch}/{self.metric}"

    def add(self, x: float, y: float, when: float, launch: int) -> None:
        """Adds a point, keeping at most about ``MAX_POINTS`` (every ``stride``-th point)."""
        self.seen += 1
        new_launch = bool(self.launches) and launch != self.launches[-1]
        if (self.seen - 1) % self.stride and not new_launch:
            if self.x:  # the last point is always the latest one
                self.x[-1], self.y[-1], self.times[-1] = x, y, when
            return
        if new_launch:
            self.breaks.append(len(self.x))
        self.x.append(x)
        self.y.append(y)
        self.times.append(when)
        self.launches.append(launch)
        if len(self.x) > 2 * MAX_POINTS:
            keep = [i for i in range(len(self.x)) if i % 2 == 0 or i in self.breaks or i == len(self.x) - 1]
            keep = sorted(set(keep) | {b - 1 for b in self.breaks if b > 0})
            where = {old: new for new, old in enumerate(keep)}
            self.x = [self.x[i] for i in keep]
            self.y = [self.y[i] for i in keep]
            self.times = [self.times[i] for i in keep]
            self.launches = [self.launches[i] for i in keep]
            self.breaks = [where[b] for b in self.breaks]
            self.stride *= 2


@dataclass
class PlotResult:
    """What [plot_run][monitor_async._cli.plot.plot_run] drew.

    Attributes:
        path: the (first) PNG written.
        panels: the panels drawn.
        constant: ``"<watch>/<metric>=value"`` of the metrics left out because they never changed.
        paths: every PNG written (one per page).
        beyond: the full keys of the panels past the last page, not drawn.
        monitor: the monitor's own counters left out (``monitor=True`` draws them).
    """

    path: Path
    panels: list[Panel]
    constant: list[str] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    beyond: list[str] = field(default_factory=list)
    monitor: int = 0


def panels(run: Run, *, constant: bool = False, monitor: bool = True) -> tuple[list[Panel], list[str]]:
    """The run's metrics as panels (watch order, then metric order), and the constant ones left out.

    Each panel keeps at most about [MAX_POINTS][monitor_async._cli.plot.MAX_POINTS] points.

    Args:
        run: the run.
        constant: also draw metrics whose value never changed (by default they
            are listed, not drawn, unless every metric is constant).
        monitor: also draw the watch ``monitor`` (the monitor's own counters).

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
    return _panels(run, constant=constant, monitor=monitor)[0]


def _panels(run: Run, *, constant: bool, monitor: bool) -> tuple[tuple[list[Panel], list[str]], list[Any], int]:
    """``((panels, left_out), alert events, monitor panels left out)``, in one pass over the run."""
    t0: float | None = None
    series: dict[str, dict[str, Panel]] = {}
    stepped: dict[str, bool] = {}
    alerts: list[Any] = []
    mine: set[str] = set()
    for launch, r in run.entries():
        if not isinstance(r, Record):
            if not isinstance(r, Launch):
                alerts.append(r)
            continue
        if t0 is None:
            t0 = r.time
        name = r.name
        if name == MONITOR and not monitor:
            mine.update(r.metrics)
            continue
        by_step = stepped.get(name)
        if by_step is None:  # a watch's first record says whether it has a step
            by_step = stepped[name] = r.step is not None
        if by_step and r.step is None:
            continue
        x = float(r.step) if by_step and r.step is not None else r.time - t0
        panels_ = series.setdefault(name, {})
        cut = len(name) + 1
        for key, value in r.metrics.items():
            metric = key[cut:] if key.startswith(name + "/") else key
            panel = panels_.get(metric)
            if panel is None:
                panel = panels_[metric] = Panel(name, metric, [], [], by_step)
            panel.add(x, value, r.time, launch)
    out: list[Panel] = []
    flat: list[Panel] = []
    for group in series.values():
        for panel in _bands(group).values():
            (out if constant or len(set(panel.y)) > 1 else flat).append(panel)
    if not out:
        return (flat, []), alerts, len(mine)
    return (out, [f"{p.watch}/{p.metric}={eng(p.y[0])}" for p in flat]), alerts, len(mine)


_QUANTILE = re.compile(r"^(.+)/p(\d+(?:[._]\d+)?)$")


def _bands(group: dict[str, Panel]) -> dict[str, Panel]:
    """A watch's panels with each distribution's quantiles (``<key>/p10``, ``/p50``, ``/p90``...) made one panel.

    Its line is the median (``p50``, else the middle quantile) and its band ``p10`` to ``p90``, else the
    lowest and highest quantiles there are; the other summary keys (count, mean, min, max) keep their panels.
    """
    found: dict[str, dict[float, str]] = {}
    for metric in group:
        match = _QUANTILE.match(metric)
        if match and f"{match.group(1)}/count" in group:
            found.setdefault(match.group(1), {})[float(match.group(2).replace("_", "."))] = metric
    if not found:
        return group
    out: dict[str, Panel] = {}
    folded = {metric for quantiles in found.values() for metric in quantiles.values()}
    for metric, panel in group.items():
        if metric not in folded:
            out[metric] = panel
            continue
        base = _QUANTILE.match(metric).group(1)  # type: ignore[union-attr]
        if base in out:
            continue
        quantiles = found[base]
        ordered = sorted(quantiles)
        middle = 50.0 if 50.0 in quantiles else ordered[len(ordered) // 2]
        low = 10.0 if 10.0 in quantiles and 90.0 in quantiles else ordered[0]
        high = 90.0 if low == 10.0 else ordered[-1]
        median = group[quantiles[middle]]
        band = Panel(median.watch, base, median.x, median.y, median.by_step, median.times, median.breaks,
                     median.launches, median.stride, median.seen)
        band.band = f"p{middle:g}" + (f", band p{low:g} to p{high:g}" if low != high else "")
        band.low, band.high = _aligned(median, group[quantiles[low]]), _aligned(median, group[quantiles[high]])
        out[base] = band
    return out


def _aligned(median: Panel, other: Panel) -> list[float]:
    """``other``'s values at ``median``'s x (the median's own where ``other`` has none)."""
    at = dict(zip(other.x, other.y, strict=False))
    return [at.get(x, y) for x, y in zip(median.x, median.y, strict=True)]


def _short(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _draw(ax: Any, panel: Panel, label: str, ticker: Any, alerts: Sequence[tuple[float, float]]) -> None:
    marker = "." if len(panel.x) <= 60 else None
    bounds = [0, *panel.breaks, len(panel.x)]
    color = None
    for begin, end in itertools.pairwise(bounds):  # each launch of the file as a line of its own
        (line,) = ax.plot(panel.x[begin:end], panel.y[begin:end], marker=marker, markersize=4, linewidth=1.2,
                          color=color)
        color = line.get_color()
        if panel.low is not None and panel.high is not None:  # a distribution: its band around the median
            ax.fill_between(panel.x[begin:end], panel.low[begin:end], panel.high[begin:end], color=color,
                            alpha=0.25, linewidth=0)
    for at in panel.breaks:
        ax.axvline(panel.x[at], color="0.4", linestyle="--", linewidth=0.8)  # a new launch began here
    for begin_t, end_t in alerts:
        xs = _x_at(panel, begin_t), _x_at(panel, end_t)
        ax.axvspan(min(xs), max(xs), color="tab:red", alpha=0.15, linewidth=0)
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


def _x_at(panel: Panel, when: float) -> float:
    """The x of wall time ``when`` on ``panel`` (its step, interpolated, when drawn against steps)."""
    times = panel.times
    if not times:
        return 0.0
    if when <= times[0]:
        return panel.x[0]
    if when >= times[-1]:
        return panel.x[-1]
    i = bisect.bisect_left(times, when)
    t_a, t_b, x_a, x_b = times[i - 1], times[i], panel.x[i - 1], panel.x[i]
    return x_a if t_b == t_a else x_a + (x_b - x_a) * (when - t_a) / (t_b - t_a)


def _intervals(alerts: Sequence[Any], end: float) -> dict[str, list[tuple[float, float]]]:
    """Per full key, the firing intervals of the alert events about it (until the run's end while firing)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for firing, resolved in episodes(alerts):
        if firing.metric and resolved is not firing:
            out.setdefault(firing.metric, []).append((firing.time, end if resolved is None else resolved.time))
    return out


def _matplotlib() -> tuple[Any, Any, Any]:
    try:
        from matplotlib import ticker
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            "plotting needs matplotlib, which is not installed: pip install matplotlib (or the extra: monitor-async[plot])"
        ) from exc
    return ticker, FigureCanvasAgg, Figure


def _page(
    drawn: Sequence[Panel], title: str, t0: float, alerts: dict[str, list[tuple[float, float]]], dpi: int,
) -> Any:
    ticker, FigureCanvasAgg, Figure = _matplotlib()
    groups: dict[str, list[Panel]] = {}
    for panel in drawn:
        groups.setdefault(panel.watch, []).append(panel)
    cols = min(COLUMNS, max(len(g) for g in groups.values()))
    rows = [math.ceil(len(g) / cols) for g in groups.values()]
    heights = [n * _PANEL_H + _HEAD_H for n in rows]
    fig = Figure(figsize=(cols * _PANEL_W, sum(heights) + 0.4), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(
        f"{_short(title, 60)} · {clock(t0, date=True)}",
        fontsize=12, fontweight="bold",
    )
    subfigs: Sequence[Any] = list(fig.subfigures(len(groups), 1, height_ratios=heights, squeeze=False)[:, 0])
    since = f"seconds since {clock(t0)}"
    for sub, (name, group), n in zip(subfigs, groups.items(), rows, strict=True):
        by_step = group[0].by_step
        sub.suptitle(
            f"{_short(name, 50)}  (against {'step' if by_step else 'wall time'})",
            x=0.01, ha="left", fontsize=11, fontweight="bold",
        )
        axes = sub.subplots(n, cols, squeeze=False)
        for i, ax in enumerate(axes.flat):
            if i < len(group):
                _draw(ax, group[i], "step" if by_step else since, ticker, alerts.get(group[i].key, ()))
            else:
                ax.set_visible(False)
    return fig


def _pages(
    run: Run, constant: bool, monitor: bool, per_page: int, max_pages: int,
) -> tuple[list[list[Panel]], list[str], list[str], dict[str, list[tuple[float, float]]], float, int]:
    _matplotlib()
    (drawn, flat), events, left_monitor = _panels(run, constant=constant, monitor=monitor)
    if not drawn:
        raise ValueError(f"no records in {run.path} yet: nothing to plot")
    t0 = min(p.times[0] for p in drawn if p.times)
    end = max(p.times[-1] for p in drawn if p.times)
    pages = [drawn[i : i + per_page] for i in range(0, len(drawn), per_page)]
    beyond = [p.key for page in pages[max_pages:] for p in page]
    return pages[:max_pages], flat, beyond, _intervals(events, end), t0, left_monitor


def figure(
    run: Run, *, constant: bool = False, dpi: int = 100, monitor: bool = True,
) -> tuple[Any, list[Panel], list[str]]:
    """The matplotlib ``Figure`` of ``run``'s first page (Agg canvas), the panels drawn and the constant metrics left out.

    Args:
        run: the run to draw; it must hold at least one record.
        constant: also draw metrics whose value never changed.
        dpi: pixels per inch (a panel is 4 x 2.5 inches).
        monitor: also draw the watch ``monitor`` (the monitor's own counters).

    Returns:
        ``(figure, panels, left_out)``; see [plot_run][monitor_async._cli.plot.plot_run].

    Raises:
        ImportError: matplotlib is not installed (the message says how to install it).
        ValueError: the run holds no records.
    """
    pages, flat, _, alerts, t0, _ = _pages(run, constant, monitor, PER_PAGE, 1)
    return _page(pages[0], run.path.name or str(run.path), t0, alerts, dpi), pages[0], flat


def plot_run(
    run: Run, out: str | os.PathLike[str], *, constant: bool = False, dpi: int = 100, monitor: bool = True,
    per_page: int = PER_PAGE, max_pages: int = MAX_PAGES,
) -> PlotResult:
    """Draws ``run`` into the PNG ``out``: a block per watch, one panel per metric, ``per_page`` panels a page.

    What the figure shows (axes, pages ``plot-1.png``..., launches, alert
    shading) is in [the CLI guide](cli.md#plot).

    Args:
        run: the run to draw; it must hold at least one record.
        out: the PNG file to write (its folder must exist).
        constant: also draw metrics whose value never changed.
        dpi: pixels per inch of the PNG (a panel is 4 x 2.5 inches).
        monitor: also draw the watch ``monitor`` (the monitor's own counters).
        per_page: panels per PNG at most (>= 1).
        max_pages: PNGs written at most (>= 1).

    Returns:
        A [PlotResult][monitor_async._cli.plot.PlotResult].

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
    pages, flat, beyond, alerts, t0, left_monitor = _pages(run, constant, monitor, max(1, per_page), max(1, max_pages))
    path = Path(out)
    paths = [path] if len(pages) == 1 else [path.with_name(f"{path.stem}-{i}{path.suffix}") for i in
                                            range(1, len(pages) + 1)]
    title = run.path.name or str(run.path)
    for page, where in zip(pages, paths, strict=True):
        fig = _page(page, title, t0, alerts, dpi)
        fig.savefig(where, format="png")
    return PlotResult(paths[0], [p for page in pages for p in page], flat, paths, beyond, left_monitor)
