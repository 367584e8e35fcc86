"""Makes docs/img/console.png and docs/img/plot.png from a real demo run.

    python docs/img/make_images.py    # needs rich and matplotlib (pillow comes with it)

console.png is an 80x24 terminal showing the demo's console table (the
demo's sinks, its ConsoleSink's table): rich lays the table out for 80x24
and renders it to styled segments, and each character is drawn in its cell
with DejaVu Sans Mono (the font matplotlib ships).
plot.png is `monitor-async plot` of the same run.
"""

from __future__ import annotations

import asyncio
import io
import tempfile
from pathlib import Path
from typing import Any

import matplotlib
from PIL import Image, ImageDraw, ImageFont
from rich.console import Console, Group
from rich.terminal_theme import MONOKAI
from rich.text import Text

from monitor_async import Monitor
from monitor_async._demo import DemoSystem
from monitor_async._plot import plot_run
from monitor_async._runs import load_run
from monitor_async.backends import ConsoleSink, CSVSink, JSONLSink, TensorBoardSink

HERE = Path(__file__).resolve().parent
SECONDS = 15.0
RUN = "runs/20250101-120000"
COLUMNS, ROWS, SIZE, PAD = 80, 24, 20, 16


async def demo(run_dir: Path) -> Any:
    """The demo's system and sinks for SECONDS; returns the console sink's table as it was before stop."""
    system = DemoSystem()
    console = ConsoleSink(io.StringIO(), live=True, title="monitor-async demo", name="console")
    sinks = [
        CSVSink(run_dir / "metrics.csv", name="csv"),
        JSONLSink(run_dir / "metrics.jsonl", name="jsonl"),
        TensorBoardSink(run_dir, name="tensorboard"),
        console,
    ]
    monitor = Monitor(sinks, poll_interval=0.25, close_sinks=True)
    system.watch(monitor)
    async with system.running(), monitor:
        await asyncio.sleep(SECONDS)
        await monitor.flush()
        return console.table.render(COLUMNS, ROWS - 1)


def terminal_png(screen: Group, path: Path) -> None:
    """``screen`` as an 80x24 terminal shows it, drawn cell by cell."""
    console = Console(width=COLUMNS, height=ROWS, force_terminal=True, color_system="truecolor")
    lines = console.render_lines(screen, console.options, pad=False)[:ROWS]
    fonts = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    regular = ImageFont.truetype(str(fonts / "DejaVuSansMono.ttf"), SIZE)
    bold = ImageFont.truetype(str(fonts / "DejaVuSansMono-Bold.ttf"), SIZE)
    ascent, descent = regular.getmetrics()
    cell_w, cell_h = regular.getlength("M"), ascent + descent
    image = Image.new("RGB", (int(COLUMNS * cell_w) + 2 * PAD, ROWS * cell_h + 2 * PAD), MONOKAI.background_color)
    draw = ImageDraw.Draw(image)
    for row, segments in enumerate(lines):
        column = 0
        for segment in segments:
            style = segment.style
            color = MONOKAI.foreground_color
            if style is not None and style.color is not None:
                color = style.color.get_truecolor(MONOKAI)
            font = bold if style is not None and style.bold else regular
            for char in segment.text:
                draw.text((PAD + column * cell_w, PAD + row * cell_h), char, font=font, fill=tuple(color))
                column += 1
    image.save(path)


def main() -> None:
    run_dir = Path(tempfile.mkdtemp()) / RUN
    table = asyncio.run(demo(run_dir))
    first = Text(f"monitor-async demo: {SECONDS:g} s of simulated training, writing to {RUN}")
    terminal_png(Group(first, table), HERE / "console.png")

    result = plot_run(load_run(run_dir), HERE / "plot.png")
    print(f"wrote {HERE / 'console.png'} and {result.path}: {len(result.panels)} panels")


if __name__ == "__main__":
    main()
