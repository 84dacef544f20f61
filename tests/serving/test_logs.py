"""Structured logging: JSON lines with fields, text format, bad settings."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from webhook.serving import logs


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_json_lines_carry_message_level_and_fields(restore_logging):
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


def test_json_lines_include_exceptions(restore_logging):
    out = io.StringIO()
    logs.configure("error", "json", stream=out)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("x").exception("failed")
    entry = json.loads(out.getvalue())
    assert "RuntimeError: boom" in entry["exc"]


def test_text_format_appends_fields(restore_logging):
    out = io.StringIO()
    logs.configure("debug", "text", stream=out)
    logging.getLogger("x").debug("hello", extra={"fields": {"a": 1}})
    assert out.getvalue().rstrip().endswith("DEBUG x: hello a=1")


def test_uvicorn_access_log_is_silenced(restore_logging):
    out = io.StringIO()
    logs.configure("info", "json", stream=out)
    logging.getLogger("uvicorn.access").info("GET / 200")
    logging.getLogger("uvicorn.error").info("Started server process")
    assert [json.loads(line)["msg"] for line in out.getvalue().splitlines()] == ["Started server process"]


@pytest.mark.parametrize(("level", "fmt"), [("loud", "json"), ("info", "xml")], ids=["level", "format"])
def test_unknown_level_or_format_is_refused(level, fmt):
    with pytest.raises(ValueError, match="unknown log"):
        logs.configure(level, fmt)
