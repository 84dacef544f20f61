"""The review endpoints as bare ASGI apps, and the Starlette app around them: what each message sequence
from the server gets back, and that every other path and method is answered as Starlette always did."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from tests.admission import asgi, samples
from webhook.admission import app, review, settings

JSON = (b"content-type", b"application/json")
LIMIT = 2000


def ok_body() -> bytes:
    return json.dumps(samples.review(samples.pod(), uid="endpoint-1")).encode()


def call(
    method: str,
    path: str,
    headers: list[tuple[bytes, bytes]],
    messages: list[dict[str, Any]],
    *,
    root_path: str = "",
) -> tuple[dict[str, Any], bytes, int]:
    """(response start message, body, how many times the app called receive)."""
    asgi_app = app.create_app(settings.build(overrides={"max_body_bytes": LIMIT}))
    scope = {**asgi.post_scope(path, b""), "method": method, "headers": headers, "root_path": root_path}
    pending = list(messages)
    sent: list[dict[str, Any]] = []
    received = 0

    async def receive() -> dict[str, Any]:
        nonlocal received
        received += 1
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    asyncio.run(asgi_app(scope, receive, send))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert not sent[1].get("more_body", False)
    return sent[0], sent[1]["body"], received


def chunks(*parts: bytes) -> list[dict[str, Any]]:
    """`parts` as http.request messages, the last without more_body."""
    return [
        {"type": "http.request", "body": part, "more_body": i < len(parts) - 1}
        for i, part in enumerate(parts)
    ]


def headers_of(start: dict[str, Any]) -> dict[bytes, bytes]:
    return dict(start["headers"])


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_a_body_split_over_several_messages_gets_the_same_answer_as_one(path):
    body = ok_body()
    whole, expected, _ = call("POST", path, [JSON], chunks(body))
    split, answer, received = call("POST", path, [JSON], chunks(b"", body[:7], b"", body[7:40], body[40:]))
    assert (split["status"], answer) == (whole["status"], expected) == (200, expected)
    assert received == 5
    assert json.loads(answer)["response"]["uid"] == "endpoint-1"
    assert headers_of(split) == {b"content-length": b"%d" % len(answer), b"content-type": b"application/json"}


def test_a_disconnect_mid_body_is_a_400_and_nothing_more_is_read(caplog):
    caplog.set_level(logging.INFO, logger="webhook.admission")
    body = ok_body()
    start, answer, received = call(
        "POST", "/validate", [JSON], [chunks(body[:10], b"")[0], {"type": "http.disconnect"}]
    )
    assert start["status"] == 400
    assert json.loads(answer) == {"error": "client disconnected before sending the whole body"}
    assert received == 2
    assert [(r.levelname, r.fields["verdict"]) for r in caplog.records] == [("WARNING", "disconnected")]


def test_a_declared_length_over_the_limit_is_refused_before_reading():
    headers = [JSON, (b"content-length", b"%d" % (LIMIT + 1))]
    start, answer, received = call("POST", "/mutate", headers, chunks(b"x" * (LIMIT + 1)))
    assert start["status"] == 413
    assert json.loads(answer) == {"error": f"request body exceeds {LIMIT} bytes"}
    assert received == 0


def test_a_streamed_body_over_the_limit_is_refused_when_it_passes_it():
    start, answer, received = call("POST", "/mutate", [JSON], chunks(*[b"x" * 600] * 10))
    assert start["status"] == 413
    assert json.loads(answer) == {"error": f"request body exceeds {LIMIT} bytes"}
    assert received == 4  # 2400 bytes: the rest is never read


def test_a_body_of_exactly_the_limit_is_read():
    start, answer, _ = call("POST", "/validate", [JSON], chunks(b" " * (LIMIT - 2) + b"{}"))
    assert start["status"] == 400  # read whole, then refused as no AdmissionReview
    assert "AdmissionReview" in json.loads(answer)["error"]


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        (None, 415),
        (b"text/plain", 415),
        (b"Application/JSON; charset=utf-8", 200),
        (b" application/json ", 200),
    ],
)
def test_the_content_type_is_checked_before_the_body_is_read(content_type, status):
    headers = [] if content_type is None else [(b"content-type", content_type)]
    start, answer, received = call("POST", "/validate", headers, chunks(ok_body()))
    assert start["status"] == status
    if status == 415:
        shown = "none" if content_type is None else content_type.decode()
        assert json.loads(answer) == {"error": f"content type must be application/json, got {shown}"}
        assert received == 0


@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "DELETE"])
@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_another_method_on_a_review_path_is_a_json_405_allowing_post(method, path):
    start, answer, received = call(method, path, [JSON], chunks(ok_body()))
    assert start["status"] == 405
    assert headers_of(start)[b"allow"] == b"POST"
    assert json.loads(answer) == {"error": "Method Not Allowed"}
    assert received == 0


@pytest.mark.parametrize("path", ["/nowhere", "/", "/validatex", "/mutate/x"])
def test_an_unknown_path_is_a_json_404(path):
    start, answer, _ = call("POST", path, [JSON], chunks(ok_body()))
    assert start["status"] == 404
    assert json.loads(answer) == {"error": "Not Found"}


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_a_trailing_slash_is_redirected_by_starlette_as_before(path):
    start, answer, received = call("POST", f"{path}/", [JSON], chunks(ok_body()))
    assert start["status"] == 307
    assert headers_of(start)[b"location"] == f"https://127.0.0.1:8443{path}?timeout=10s".encode()
    assert answer == b""
    assert received == 0


def test_under_a_root_path_starlette_routes_to_the_same_endpoint():
    body = ok_body()
    direct, expected, _ = call("POST", "/validate", [JSON], chunks(body))
    routed, answer, _ = call("POST", "/hook/validate", [JSON], chunks(body), root_path="/hook")
    assert (routed["status"], answer) == (direct["status"], expected)
    assert headers_of(routed) == headers_of(direct)


def test_an_error_inside_the_review_is_a_json_500_logged_with_its_traceback(monkeypatch, caplog):
    def broken(*args: object) -> review.Result:
        raise RuntimeError("secret detail")

    monkeypatch.setattr(review, "review", broken)
    caplog.set_level(logging.INFO, logger="webhook.admission")
    start, answer, _ = call("POST", "/mutate", [JSON], chunks(ok_body()))
    assert start["status"] == 500
    assert json.loads(answer) == {"error": "internal error while reviewing the request"}
    assert b"secret" not in answer
    assert b"Traceback" not in answer
    failed, line = caplog.records
    assert (failed.levelname, failed.getMessage(), failed.fields) == (
        "ERROR",
        "review failed",
        {"endpoint": "mutate"},
    )
    assert failed.exc_info is not None
    assert (line.levelname, line.fields["verdict"], line.fields["status"]) == ("WARNING", "error", 500)


def test_lifespan_and_probes_go_to_starlette():
    start, answer, _ = call("GET", "/healthz", [], [])
    assert (start["status"], json.loads(answer)) == (200, {"status": "ok"})
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: Any) -> None:
        sent.append(message["type"])

    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    asyncio.run(app.create_app(settings.build())(scope, receive, send))
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
