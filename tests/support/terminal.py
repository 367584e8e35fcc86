"""A command run on a real pseudo-terminal of a given size, its screen output collected as it comes."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Sequence

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


class Terminal:
    """Runs ``command`` with its stdout and stdin on a pty of ``columns`` x ``rows`` (stderr: a pipe).

    ``text()`` is what the program wrote so far, terminal codes removed.
    """

    def __init__(self, command: Sequence[str], *, columns: int = 80, rows: int = 24, **popen: object) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TERM": "xterm-256color"}
        env.pop("COLUMNS", None)
        env.pop("LINES", None)
        self.proc = subprocess.Popen(
            list(command), stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env, close_fds=True,
            **popen,  # type: ignore[call-overload]
        )
        os.close(slave)
        self._master = master
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._chunks.append(data)

    def raw(self) -> str:
        with self._lock:
            return b"".join(self._chunks).decode("utf-8", "replace")

    def text(self) -> str:
        return ANSI.sub("", self.raw()).replace("\r\n", "\n")

    def wait_for(self, needle: str, timeout: float = 60.0, after: int = 0) -> int:
        """Waits until ``needle`` appears in :meth:`text` past index ``after``; returns where."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            at = self.text().find(needle, after)
            if at >= 0:
                return at
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} did not show within {timeout}s; the screen got:\n{self.text()[-3000:]}")

    def finish(self, timeout: float = 30.0) -> tuple[int, str]:
        """Waits for the program to exit (kills it after ``timeout``); returns its exit code and its stderr."""
        try:
            _, stderr = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, stderr = self.proc.communicate()
        self._reader.join(timeout=5)
        os.close(self._master)
        return self.proc.returncode, stderr.decode("utf-8", "replace")


def last_frame(text: str, title: str) -> list[str]:
    """The lines of the last table drawn whose title starts with ``title``, up to its bottom border."""
    start = text.rindex(title)
    lines = text[start:].split("\n")
    end = next(i for i, line in enumerate(lines) if line.startswith("╰"))
    return [line.rstrip() for line in lines[: end + 1]] + [
        line.rstrip() for line in lines[end + 1 : end + 4] if line.startswith(("monitor:", "+"))
    ]
