"""`monitor-async plot`: a real matplotlib PNG of a real demo run, its pixels and its text boxes checked."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from matplotlib.image import imread
from matplotlib.text import Text

from monitor_async._cli.plot import figure
from monitor_async._cli.runs import load_run
from tests.support.cli import cli


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("runs")
    out = cli("demo", "--seconds", "3", "--logdir", str(logdir), "--no-console", timeout=60)
    assert out.returncode == 0, out.stderr
    (run,) = logdir.iterdir()
    return run


def test_plot_writes_a_png_with_a_panel_per_metric(run_dir: Path, tmp_path: Path) -> None:
    png = tmp_path / "plot.png"
    out = cli("plot", str(run_dir), "-o", str(png))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"wrote {png}: ") and lines[0].endswith(" panels of 4 watches")
    assert lines[1].startswith("not drawn, never changed (--all draws them): ")
    assert "the monitor's own counters" in lines[2] and "--monitor draws them" in lines[2]
    assert "replay_buffer/capacity=50k" in lines[1]
    assert png.stat().st_size > 50_000
    pixels = imread(png)
    height, width = pixels.shape[:2]
    assert width == 1600 and height > 1000, "four 4-inch panels a row at 100 dpi"
    ink = (pixels[..., :3] < 0.9).any(axis=-1).mean()
    assert 0.02 < ink < 0.5, f"{ink:.1%} of the pixels are not white"
    blue = ((pixels[..., 2] > 0.6) & (pixels[..., 0] < 0.3)).mean()
    assert blue > 0.001, "the lines are drawn"


def test_no_text_overlaps_and_axes_say_what_they_are(run_dir: Path) -> None:
    fig, panels, _ = figure(load_run(run_dir))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    page = fig.bbox
    ticks, drawn = set(), []  # tick labels: only those of ticks inside the axis' view are drawn
    for ax in fig.get_axes():
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                ticks.add(tick.label1)
                if low - 1e-9 * abs(high - low) <= tick.get_loc() <= high + 1e-9 * abs(high - low):
                    drawn.append(tick.label1)
    texts = [t for t in fig.findobj(Text) if t not in ticks] + drawn
    boxes = []
    for text in texts:
        if not (text.get_visible() and text.get_text().strip()):
            continue
        if text.axes is not None and not text.axes.get_visible():
            continue
        boxes.append((text.get_text(), text.get_window_extent(renderer).shrunk(0.95, 0.9)))
    assert len(boxes) > 100
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"
    for _, box in boxes:
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, "inside the page"
    labels = {(p.watch, ax.get_xlabel()) for p, ax in zip(panels, [a for a in fig.get_axes() if a.get_visible()],
                                                           strict=True)}
    assert ("collector", "step") in labels and ("learner", "step") in labels
    assert any(w == "inference" and x.startswith("seconds since ") for w, x in labels), "no step: wall time"
    titles = [ax.get_title() for ax in fig.get_axes() if ax.get_visible()]
    assert "frames/s" in titles and "frames" in titles and "loss" in titles
    headers = [sub.get_suptitle() for sub in fig.subfigs]
    assert headers[0] == "collector  (against step)" and "inference  (against wall time)" in headers


def test_metric_globs_and_all(run_dir: Path, tmp_path: Path) -> None:
    png = tmp_path / "loss.png"
    out = cli("plot", str(run_dir), "-o", str(png), "--metric", "*loss*")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"wrote {png}: 1 panel of 1 watch"
    assert imread(png).shape[1] == 400
    out = cli("plot", str(run_dir), "-o", str(png), "--metric", "replay_buffer/*", "--all")
    assert out.returncode == 0 and "not drawn" not in out.stdout
    assert out.stdout.startswith(f"wrote {png}: 8 panels of 1 watch")


def test_default_output_is_in_the_run(run_dir: Path) -> None:
    out = cli("plot", str(run_dir), "--metric", "learner/*")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"wrote {run_dir / 'plot.png'}: 2 panels")


def test_without_matplotlib_the_message_says_what_to_install(run_dir: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['matplotlib'] = None; "
         "from monitor_async._cli.main import main; sys.exit(main(sys.argv[1:]))", "plot", str(run_dir)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "monitor-async plot: plotting needs matplotlib, which is not installed: pip install matplotlib "
        "(or the extra: monitor-async[plot])"
    )
