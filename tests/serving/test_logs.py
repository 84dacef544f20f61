"""Structured logging: JSON lines with fields, text format, bad settings."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from webhook.serving import logs


def test_json_lines_carry_message_level_and_fields():
    out = io.StringIO()
    logs.configure("info", "json", stream=out)
    logging.getLogger("webhook.test").info("review", extra={"fields": {"uid": "u-1", "verdict": "denied"}})
    logging.getLogger("webhook.test").debug("hidden at info")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["msg"] == "review"
    assert entry["level"] == "info"
    assert entry["logger"] == "webhook.test"
    assert entry["uid"] == "u-1"
    assert entry["verdict"] == "denied"
    assert entry["ts"].endswith("+00:00")


def test_json_lines_include_exceptions():
    out = io.StringIO()
    logs.configure("error", "json", stream=out)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("x").exception("failed")
    entry = json.loads(out.getvalue())
    assert "RuntimeError: boom" in entry["exc"]


def test_text_format_appends_fields():
    out = io.StringIO()
    logs.configure("debug", "text", stream=out)
    logging.getLogger("x").debug("hello", extra={"fields": {"a": 1}})
    assert out.getvalue().rstrip().endswith("DEBUG x: hello a=1")


def test_text_format_keeps_request_values_on_one_line_and_escapes_them():
    out = io.StringIO()
    logs.configure("info", "text", stream=out)
    forged = "u1 verdict=allowed\n2026-11-25 00:00:00,000 ERROR webhook.admission: forged"
    fields = {"uid": forged, "name": "\x1b[31mred", "ns": 'a"b', "empty": "", "plain": "train-0"}
    logging.getLogger("webhook.admission").info("review of\u2028x", extra={"fields": fields})
    text = out.getvalue()
    assert text.count("\n") == 1 and "\x1b" not in text and "\u2028" not in text
    assert text.rstrip("\n").endswith(
        "INFO webhook.admission: review of\\u2028x"
        ' uid="u1 verdict=allowed\\n2026-11-25 00:00:00,000 ERROR webhook.admission: forged"'
        ' name="\\x1b[31mred" ns="a\\"b" empty="" plain=train-0'
    )


def test_text_format_puts_a_traceback_after_the_line():
    out = io.StringIO()
    logs.configure("info", "text", stream=out)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("x").exception("failed", extra={"fields": {"a": 1}})
    first, *rest = out.getvalue().splitlines()
    assert first.endswith("ERROR x: failed a=1")
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "RuntimeError: boom"


def test_uvicorn_access_log_is_silenced():
    out = io.StringIO()
    logs.configure("info", "json", stream=out)
    logging.getLogger("uvicorn.access").info("GET / 200")
    logging.getLogger("uvicorn.error").info("Started server process")
    assert [json.loads(line)["msg"] for line in out.getvalue().splitlines()] == ["Started server process"]


def test_urllib3_retry_warnings_are_not_logged_but_its_errors_are():
    out = io.StringIO()
    logs.configure("info", "text", stream=out)
    pool = logging.getLogger("urllib3.connectionpool")
    pool.warning("Retrying (Retry(total=2, connect=None, ...)) after connection broken by ...")
    pool.error("a real urllib3 error")
    assert "Retrying" not in out.getvalue()
    assert "a real urllib3 error" in out.getvalue()


@pytest.mark.parametrize(("level", "fmt"), [("loud", "json"), ("info", "xml")], ids=["level", "format"])
def test_unknown_level_or_format_is_refused(level, fmt):
    with pytest.raises(ValueError, match="unknown log"):
        logs.configure(level, fmt)


@pytest.fixture
def direct_logger() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger whose records reach only a JSON handler of ours (as in the servers; pytest's capture
    handlers sit on the root logger, so this one does not propagate)."""
    out = io.StringIO()
    logger = logging.getLogger("webhook.test.direct")
    handler = logs.JsonLinesHandler(out)
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, out
    logger.removeHandler(handler)
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


FIELDS = {"uid": "u-1", "verdict": "denied", "violations": 2, "duration_ms": 0.25, "msg": "not mine"}


def test_emit_writes_the_line_logging_would_write(direct_logger):
    logger, out = direct_logger
    assert logs._direct_handler(logger, logging.INFO) is logger.handlers[0]  # the fast path is taken
    logs.emit(logger, logging.INFO, "review", FIELDS)
    logger.info("review", extra={"fields": FIELDS})
    direct, through_logging = (json.loads(line) for line in out.getvalue().splitlines())
    assert direct.pop("ts")[:16] == through_logging.pop("ts")[:16]  # same minute at least
    assert direct == through_logging
    assert list(direct) == ["level", "logger", "msg", "uid", "verdict", "violations", "duration_ms"]
    assert direct["msg"] == "review"  # the field named msg does not replace the message


def test_emit_respects_the_level(direct_logger):
    logger, out = direct_logger
    logs.emit(logger, logging.DEBUG, "hidden", FIELDS)
    assert out.getvalue() == ""


def test_emit_goes_through_logging_when_another_handler_listens(direct_logger, caplog):
    logger, out = direct_logger
    logger.propagate = True  # now caplog's handler on the root logger sees it too
    caplog.set_level(logging.INFO, logger="webhook.test.direct")
    logs.emit(logger, logging.WARNING, "rejected request", {"status": 400})
    assert [(r.getMessage(), r.fields) for r in caplog.records] == [("rejected request", {"status": 400})]
    assert json.loads(out.getvalue())["status"] == 400


def test_emit_in_text_format_uses_the_text_formatter():
    out = io.StringIO()
    logs.configure("info", "text", stream=out)
    logs.emit(logging.getLogger("x"), logging.INFO, "review", {"uid": "u-2"})
    assert out.getvalue().rstrip().endswith("INFO x: review uid=u-2")


def test_json_timestamps_are_utc_with_milliseconds(direct_logger):
    logger, out = direct_logger
    before = datetime.now(UTC)
    logs.emit(logger, logging.INFO, "review", {})
    ts = json.loads(out.getvalue())["ts"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", ts)
    assert before - timedelta(seconds=1) <= datetime.fromisoformat(ts) <= datetime.now(UTC)
