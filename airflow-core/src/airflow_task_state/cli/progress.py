"""
What a long command (export, import, clean) is doing while it works: one line on stderr, rewritten
in place, only when stderr is a terminal. A script, a pipe or a log file gets nothing extra: the
command's own lines are all it writes. Like the upgrade command's "<table>: <read>/<total> rows
read", but on one line, since a person is watching.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

#: Rewriting the line more often than this costs time and shows nothing a person can read.
INTERVAL_S = 0.1
#: How often :func:`ticking` rewrites its line: a whole-second clock needs no more.
TICK_S = 0.5


class Progress:
    """One line of progress on *stream* (stderr by default), shown only when it is a terminal."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None) -> None:
        self._stream = sys.stderr if stream is None else stream
        self.enabled = self._stream.isatty() if enabled is None else enabled
        self._shown = ""
        self._last = float("-inf")
        self._lock = threading.Lock()  # ticking() shows from a thread of its own

    def show(self, text: str, *, now: bool = False, final: bool = False) -> None:
        """
        Show *text* in place of the line shown before (at most every INTERVAL_S unless *now*), cut
        to the terminal's width unless it is the *final* line: "\r" returns to the start of the
        last row only, so a line that wrapped would leave a row behind at every rewrite.
        """
        if not self.enabled:
            return
        with self._lock:
            moment = time.monotonic()
            if not now and moment - self._last < INTERVAL_S:
                return
            self._last = moment
            if not final:
                text = _fitted(text, self._columns())
            # Padded with spaces: a shorter line must not leave the end of the longer one behind.
            self._stream.write("\r" + text.ljust(len(self._shown)))
            self._stream.flush()
            self._shown = text

    def _columns(self) -> int | None:
        try:  # asked each time: the terminal may be resized while the command works
            return os.get_terminal_size(self._stream.fileno()).columns
        except (AttributeError, ValueError, OSError):  # not a file, or no size known
            return None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        # A command that fails midway: its one-line error starts on a line of its own.
        with self._lock:
            if self._shown:
                self._stream.write("\n")
                self._stream.flush()
                self._shown = ""

    def done(self, text: str) -> None:
        """Show the final *text* and end the line, so what the command prints next starts afresh."""
        if not self.enabled:
            return
        self.show(text, now=True, final=True)
        with self._lock:
            self._stream.write("\n")
            self._stream.flush()
            self._shown = ""


def _fitted(text: str, columns: int | None) -> str:
    """*text* cut to fit *columns* less one (writing the last column wraps on some terminals)."""
    return text if not columns or len(text) < columns else text[: max(0, columns - 4)] + "..."


@contextmanager
def ticking(progress: Progress, doing: str) -> Iterator[Callable[[str], None]]:
    """
    For work that reports nothing until it ends (a backend's ``cleanup``): "*doing*... N s" while
    it runs. Yields the function that ends the line with the outcome; a failure ends it as is.
    """
    if not progress.enabled:
        yield lambda outcome: None
        return
    started = time.monotonic()
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(TICK_S):
            progress.show(f"{doing}... {time.monotonic() - started:.0f} s")

    progress.show(f"{doing}...", now=True)
    thread = threading.Thread(target=tick, name="state-cli-progress", daemon=True)
    thread.start()
    outcome: list[str] = []
    try:
        yield outcome.append
    finally:
        stop.set()
        thread.join()
        elapsed = f"{time.monotonic() - started:.0f} s"
        progress.done(f"{doing}: {outcome[0]} ({elapsed})" if outcome else f"{doing}... {elapsed}")
