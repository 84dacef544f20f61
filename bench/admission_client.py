"""The admission bench's Python load generator (used when wrk is not installed): raw asyncio + ssl,
keep-alive connections, one request in flight each, every answer checked for `"allowed":true`.

    .venv/bin/python bench/admission_client.py PORT PATH CA_FILE CONNECTIONS SECONDS   # JSON on stdout
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time
from pathlib import Path

from admission_review import realistic_review


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> None:
    """One request and its answer, checked: 200 and `"allowed":true`."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = head[9:12]
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    body = await reader.readexactly(length)
    if status != b"200" or b'"allowed":true' not in body.replace(b" ", b""):
        raise RuntimeError(f"unexpected answer {status!r}: {body[:200]!r}")


async def one_connection(
    port: int, ctx: ssl.SSLContext, request: bytes, deadline: float, latencies: list[float]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
    try:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            await _exchange(reader, writer, request)
            latencies.append(time.perf_counter() - start)
    finally:
        writer.close()
        await writer.wait_closed()


def _request(port: int, path: str, body: bytes) -> bytes:
    return (
        f"POST {path}?timeout=10s HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, */*\r\nUser-Agent: kube-apiserver-admission\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def check(port: int, path: str, ca: Path) -> None:
    """One request as the load sends it, its answer checked (wrk counts only the status)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
    try:
        await _exchange(reader, writer, _request(port, path, json.dumps(realistic_review()).encode()))
    finally:
        writer.close()
        await writer.wait_closed()


async def load(port: int, path: str, ca: Path, connections: int, seconds: float) -> dict[str, float]:
    ctx = ssl.create_default_context(cafile=str(ca))
    body = json.dumps(realistic_review()).encode()
    request = _request(port, path, body)
    warm: list[float] = []
    await asyncio.gather(
        *(one_connection(port, ctx, request, time.perf_counter() + 0.5, warm) for _ in range(4))
    )
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(
        *(one_connection(port, ctx, request, deadline, latencies) for _ in range(connections))
    )
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "requests": len(latencies),
        "all_requests": len(warm) + len(latencies),
        "body_bytes": len(body),
    }


if __name__ == "__main__":
    port, path, ca, conns, secs = sys.argv[1:]
    print(json.dumps(asyncio.run(load(int(port), path, Path(ca), int(conns), float(secs)))))
