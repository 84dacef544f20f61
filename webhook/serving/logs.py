"""Logging set-up for the servers: JSON lines (default) or plain text, on stderr.

Callers attach structured fields with `log.info("msg", extra={"fields": {...}})` (or `emit`, the same
for per-request lines); they are merged into the JSON object. Log identifiers and verdicts, never whole
objects or certificates, at info level.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

import orjson

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("json", "text")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the record's `fields`, and exc on errors."""

    def __init__(self) -> None:
        super().__init__()
        # The webhook logs a line per review: orjson encodes it (the stdlib encoder, built once, is the
        # fallback for what orjson refuses), and the timestamp's date-and-seconds part is made once per
        # second.
        self._encoder = json.JSONEncoder(default=str, ensure_ascii=False)
        self._seconds: tuple[int, str] = (-1, "")

    def _timestamp(self, created: float) -> str:
        """ISO 8601 in UTC with milliseconds, e.g. 2025-01-02T03:04:05.678+00:00."""
        second = int(created)
        cached = self._seconds  # one tuple, swapped whole: safe if two threads format at once
        if cached[0] != second:
            cached = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
            self._seconds = cached
        return f"{cached[1]}.{int((created - second) * 1000):03d}+00:00"

    def line(
        self, created: float, level: str, logger: str, msg: str, *, fields: object, exc: str | None = None
    ) -> str:
        """The JSON line of one entry (`fields` merged in when it is a dict; ts/level/logger/msg win)."""
        entry: dict[str, Any] = {
            "ts": self._timestamp(created),
            "level": level,
            "logger": logger,
            "msg": msg,
        }
        if isinstance(fields, dict):
            for key, value in fields.items():
                entry.setdefault(str(key), value)
        if exc:
            entry["exc"] = exc
        try:
            return orjson.dumps(entry, default=str).decode()
        except (orjson.JSONEncodeError, TypeError):  # ints past 64 bits, lone surrogates
            text: str = self._encoder.encode(entry)
            return text

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        fields = getattr(record, "fields", None)
        return self.line(
            record.created, record.levelname.lower(), record.name, record.getMessage(), fields=fields, exc=exc
        )


class TextFormatter(logging.Formatter):
    """`time level logger: msg key=value ...` for people at a terminal, one line per record (then the
    traceback, if any). Values that came from a request (a uid, a pod name) may hold anything: what is
    not printable is escaped, and a value with a space, quote or `=` is quoted, so none can end the line,
    forge a second one or send terminal escapes."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = f"{self.formatTime(record)} {record.levelname} {record.name}: {_escaped(record.getMessage())}"
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            line += " " + " ".join(f"{_escaped(str(key))}={_quoted(value)}" for key, value in fields.items())
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def _escaped(text: str) -> str:
    """`text` with each unprintable character (newlines, ESC, U+2028 ...) written as its Python escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _quoted(value: object) -> str:
    text = str(value)
    if text and text.isprintable() and not any(c in text for c in ' "=\\'):
        return text
    return '"' + _escaped(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


class JsonLinesHandler(logging.StreamHandler[TextIO]):
    """The handler `configure` installs for JSON; `emit` may write to it directly."""

    formatter: JsonFormatter

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.setFormatter(JsonFormatter())

    def write_line(self, line: str) -> None:
        """What `emit` does with a formatted record (the lock keeps lines whole across threads)."""
        self.acquire()
        try:
            self.stream.write(line + self.terminator)
            self.flush()
        finally:
            self.release()


def _direct_handler(logger: logging.Logger, level: int) -> JsonLinesHandler | None:
    """The one handler a record at `level` would reach when it is ours and nothing else (no filter, no
    other handler) is on the way; None otherwise, e.g. under pytest's caplog."""
    found: JsonLinesHandler | None = None
    node: logging.Logger | None = logger
    while node is not None:
        if node.filters:
            return None
        for handler in node.handlers:
            if found is not None or not isinstance(handler, JsonLinesHandler) or handler.filters:
                return None
            if level >= handler.level:
                found = handler
        if not node.propagate:
            break
        node = node.parent
    return found


def emit(logger: logging.Logger, level: int, msg: str, fields: dict[str, Any]) -> None:
    """`logger.log(level, msg, extra={"fields": fields})`, cheaper for lines logged on every request.

    When the record would reach only the JSON handler `configure` installed (the servers' set-up), the
    line is formatted and written directly: the same line without building a LogRecord (~5 us less per
    line). Any other set-up (text format, extra handlers or filters, caplog) goes through `logging`.
    """
    if not logger.isEnabledFor(level):
        return
    handler = _direct_handler(logger, level)
    if handler is None:
        logger.log(level, msg, extra={"fields": fields})
        return
    try:
        name = logging.getLevelName(level).lower()
        handler.write_line(handler.formatter.line(time.time(), name, logger.name, msg, fields=fields))
    except Exception:  # a closed or broken stream: let logging report it as it would
        logger.log(level, msg, extra={"fields": fields})


def configure(level: str = "info", fmt: str = "json", stream: TextIO | None = None) -> None:
    """Route every logger (uvicorn's included) through one stderr handler in the chosen format.

    Raises ValueError for an unknown level or format."""
    if level.lower() not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; choose one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; choose one of {', '.join(FORMATS)}")
    # Record fields no formatter of ours prints; skipping them saves ~1-3 us per record (logging HOWTO,
    # "Optimization").
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    handler: logging.Handler
    if fmt == "json":
        handler = JsonLinesHandler(stream or sys.stderr)
    else:
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # uvicorn's loggers would otherwise print in their own format; its access log repeats our review line.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.asgi"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
    access = logging.getLogger("uvicorn.access")
    access.handlers = []
    access.propagate = False
    # urllib3 warns on each retry with a long repr; webhook.kube logs the failure once, in words.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
