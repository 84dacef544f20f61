"""A one-line progress report on a terminal, e.g. `reading pods: 12,500`, rewritten in place and erased
when the work ends; nothing at all when the stream is not a terminal (piped, redirected, CI logs).
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import TextIO, TypeVar

T = TypeVar("T")

CLEAR_LINE = "\r\x1b[K"  # carriage return, then erase to the end of the line (ANSI, every terminal)


class Progress:
    """`with Progress() as p: p.show("...")`. Writes at most every `interval` seconds; the line is cut to
    the terminal's width, since a wrapped line could not be rewritten in place."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        enabled: bool | None = None,
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = _is_terminal(self._stream) if enabled is None else enabled
        self._interval = interval
        self._clock = clock
        self._last = -interval
        self._shown = False

    def show(self, text: str, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = self._clock()
        if not force and now - self._last < self._interval:
            return
        self._last = now
        width = shutil.get_terminal_size().columns - 1
        self._stream.write(CLEAR_LINE + text[:width])
        self._stream.flush()
        self._shown = True

    def counted(self, items: Iterable[T], label: str) -> Iterator[T]:
        """Yield `items`, showing `<label>: <how many so far>`."""
        self.show(f"{label} ...", force=True)
        for n, item in enumerate(items, 1):
            self.show(f"{label}: {n:,}")
            yield item

    def clear(self) -> None:
        if self._shown:
            self._stream.write(CLEAR_LINE)
            self._stream.flush()
            self._shown = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.clear()  # also on Ctrl-C and errors: the message that follows starts on a clean line


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False
