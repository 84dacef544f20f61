"""What a request may hold beside its body, what it may not ask for, and refusals on a pipelined
connection: each over a real socket (`webhook.serving.protocol`)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from tests.serving.rawhttp import connect, read_all, serve, timed_read
from webhook.serving import protocol, server

LIMITS = protocol.Limits(header_timeout_s=3, body_timeout_s=3, max_header_bytes=4096)
WHOLE = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"


@pytest.fixture
def srv() -> Iterator[server.AppServer]:
    with serve(LIMITS) as running:
        yield running


def answers(data: bytes) -> list[bytes]:
    """The status lines in what the server sent, in order (a body may run into the next one)."""
    return re.findall(rb"HTTP/1\.1 \d{3} [^\r]*", data)


def stream(sock, pieces: Iterator[bytes]) -> bytes:
    """Send piece after piece (pausing so each is its own read) until the server closes; what it sent."""
    try:
        for piece in pieces:
            sock.sendall(piece)
            time.sleep(0.005)
    except (BrokenPipeError, ConnectionResetError):
        pass
    try:
        return read_all(sock)
    except ConnectionResetError:
        pytest.fail("the server reset the connection instead of answering")


@pytest.mark.parametrize(
    "upgrade",
    [b"h2c", b"websocket", b"foo"],
)
def test_an_upgrade_is_refused_and_its_body_never_runs_as_a_request(srv, upgrade):
    smuggled = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    head = b"POST / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: " + upgrade
    head += b"\r\nContent-Length: %d\r\n\r\n" % len(smuggled)
    with connect(srv) as sock:
        data = stream(sock, iter([head, smuggled]))
    assert answers(data) == [b"HTTP/1.1 400 Bad Request"]
    assert data.endswith(b'{"error":"protocol upgrades and CONNECT are not supported"}')


def test_connect_is_refused(srv):
    with connect(srv) as sock:
        data = stream(sock, iter([b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n", WHOLE]))
    assert answers(data) == [b"HTTP/1.1 400 Bad Request"]


@pytest.mark.parametrize("coding", [b"gzip, chunked", b"deflate,chunked", b"x-custom, chunked"])
def test_a_transfer_coding_other_than_chunked_gets_a_501(srv, coding):
    with connect(srv) as sock:
        sock.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + coding + b"\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
        )
        data, _ = timed_read(sock)
    assert answers(data) == [b"HTTP/1.1 501 Not Implemented"]
    assert b"the only transfer coding supported is chunked" in data


def test_headers_streamed_past_the_limit_get_a_431_before_the_deadline(srv):
    pieces = iter([b"POST / HTTP/1.1\r\nHost: x\r\nX-A: ", *[b"a" * 1024] * 64])
    with connect(srv) as sock:
        start = time.monotonic()
        data = stream(sock, pieces)
    assert answers(data) == [b"HTTP/1.1 431 Request Header Fields Too Large"]
    assert time.monotonic() - start < LIMITS.header_timeout_s


def test_many_small_headers_past_the_limit_get_a_431(srv):
    pieces = iter([b"POST / HTTP/1.1\r\nHost: x\r\n", *[b"X-%d: 1\r\n" % i for i in range(2000)]])
    with connect(srv) as sock:
        data = stream(sock, pieces)
    assert answers(data) == [b"HTTP/1.1 431 Request Header Fields Too Large"]


@pytest.mark.parametrize(
    "head",
    [
        b"POST / HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 6000 + b"\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 50) for i in range(100)),
        b"POST /" + b"p" * 6000 + b" HTTP/1.1\r\nHost: x\r\n",
    ],
    ids=["one-header", "many-headers", "long-url"],
)
def test_a_head_past_the_limit_in_a_single_read_gets_a_431(srv, head):
    # The whole request in one read: nothing streams past the limit, the parsed head is weighed.
    with connect(srv) as sock:
        sock.sendall(head + b"Content-Length: 2\r\n\r\n{}")
        data, _ = timed_read(sock)
    assert answers(data) == [b"HTTP/1.1 431 Request Header Fields Too Large"]


def test_a_head_begun_in_a_read_that_ended_another_request_is_weighed_whole(srv):
    # The first read ends a whole request and begins the next one's head: counted for neither.
    big = b"POST / HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 6000
    with connect(srv) as sock:
        data = stream(sock, iter([WHOLE + big, b"\r\nContent-Length: 2\r\n\r\n{}"]))
    assert answers(data) == [b"HTTP/1.1 200 OK", b"HTTP/1.1 431 Request Header Fields Too Large"]


def test_trailers_past_the_limit_in_a_single_read_are_refused(srv):
    body = b"2\r\n{}\r\n0\r\n" + b"".join(b"X-T%d: %s\r\n" % (i, b"t" * 200) for i in range(100)) + b"\r\n"
    with connect(srv) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
        data, _ = timed_read(sock)
    assert answers(data) == [b"HTTP/1.1 400 Bad Request"]
    assert data.endswith(b'{"error":"too many bytes of chunk lines and trailers"}')


def test_a_request_pipelined_after_refused_trailers_never_runs(srv):
    trailers = b"".join(b"X-T%d: %s\r\n" % (i, b"t" * 200) for i in range(100)) + b"\r\n"
    refused = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n" + trailers
    after = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    with connect(srv) as sock:
        sock.sendall(WHOLE + refused + after)
        data, _ = timed_read(sock)
    # The whole request's answer, then the refusal and a close: nothing answers the one behind it.
    assert answers(data) == [b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request"]
    assert data.endswith(b'{"error":"too many bytes of chunk lines and trailers"}')


def test_small_trailers_are_served(srv):
    body = b"2\r\n{}\r\n0\r\nX-Checksum: abc\r\n\r\n"
    with connect(srv) as sock:
        sock.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n" + body
        )
        data, _ = timed_read(sock)
    assert answers(data) == [b"HTTP/1.1 200 OK"]


def test_a_large_body_in_a_single_read_is_served(srv):
    body = b"[" + b"1," * 5000 + b"1]"
    with connect(srv) as sock:
        sock.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
            + body
        )
        data, _ = timed_read(sock)
    assert answers(data) == [b"HTTP/1.1 200 OK"]
    assert data.endswith(b"%d" % len(body))


def test_headers_under_the_limit_are_served(srv):
    head = b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-A: " + b"a" * 3000
    head += b"\r\nContent-Length: 2\r\n\r\n{}"
    with connect(srv) as sock:
        data = stream(sock, iter([head[:1000], head[1000:2000], head[2000:]]))
    assert answers(data) == [b"HTTP/1.1 200 OK"]


def test_a_trailer_streamed_past_the_limit_is_refused_before_the_deadline(srv):
    start_body = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-T: "
    with connect(srv) as sock:
        start = time.monotonic()
        data = stream(sock, iter([start_body, *[b"t" * 1024] * 64]))
    assert answers(data) == [b"HTTP/1.1 400 Bad Request"]
    assert data.endswith(b'{"error":"too many bytes of chunk lines and trailers"}')
    assert time.monotonic() - start < LIMITS.body_timeout_s


def test_small_chunks_with_their_usual_overhead_are_served(srv):
    chunks = [b"%x\r\n%s\r\n" % (8, b"x" * 8) for _ in range(3000)]  # 24 KB of body, 18 KB of chunk lines
    pieces = [b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"]
    pieces += [b"".join(chunks[i : i + 100]) for i in range(0, len(chunks), 100)]
    pieces.append(b"0\r\nX-Trailer: fine\r\n\r\n")
    with connect(srv) as sock:
        data = stream(sock, iter(pieces))
    assert answers(data) == [b"HTTP/1.1 200 OK"]
    assert data.endswith(b"24000")


@pytest.mark.parametrize(
    "after",
    [b"GARBAGE\r\n\r\n", b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n"],
    ids=["not-http", "bad-length"],
)
def test_bad_bytes_after_whole_requests_are_refused_after_their_answers(srv, after):
    with connect(srv) as sock:
        sock.sendall(WHOLE + WHOLE + after)
        data, _ = timed_read(sock)
    assert answers(data) == [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request"]
    assert data.endswith(b'{"error":"invalid HTTP request"}')


def test_a_content_length_short_of_the_body_answers_the_request_then_refuses_the_rest(srv):
    with connect(srv) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}0123456789")
        data, _ = timed_read(sock)
    assert answers(data) == [b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request"]


def test_half_a_request_behind_a_whole_one_gets_the_header_deadline():
    with (
        serve(protocol.Limits(header_timeout_s=0.3, body_timeout_s=0.3)) as running,
        connect(running) as sock,
    ):
        sock.sendall(WHOLE + b"POST / HTTP/1.1\r\nHo")
        data, waited = timed_read(sock)
    assert answers(data) == [b"HTTP/1.1 200 OK", b"HTTP/1.1 408 Request Timeout"]
    assert waited < 2  # not the keep-alive deadline


def test_a_large_body_pipelined_with_the_next_request_is_not_counted_as_its_headers(srv):
    big = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n" + b"x" * 200_000
    with connect(srv) as sock:
        sock.sendall(big + b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n")
        time.sleep(0.05)
        sock.sendall(b"Content-Length: 2\r\n\r\n{}")
        data, _ = timed_read(sock)
    assert answers(data) == [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK"]


def test_a_large_body_does_not_count_against_the_next_requests_headers_on_a_kept_alive_connection(srv):
    with connect(srv) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100_000)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n")
        time.sleep(0.05)  # the headers and the body in reads of their own
        sock.sendall(b"{}")
        data, _ = timed_read(sock)
    assert answers(data) == [b"HTTP/1.1 200 OK"]
