"""The client side of "never pinned", shared by tests/admission/test_stalled.py (hundreds of connections in
CI) and bench/admission_stalled.py (2,000 and more): stalled TLS connections, timed fresh requests, the
server's RSS.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path

CHART_LIMIT_MIB = 256  # charts/gpushare/values.yaml: webhook resources.limits.memory
# Half send nothing after the handshake, a quarter half the headers, a quarter the headers and half a body.
STALLS = (
    b"",
    b"",
    b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Ty",
    b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    b"Content-Length: 4096\r\n\r\n{",
)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"process {pid} reports no VmRSS (it has exited)")


async def open_stalled(port: int, ctx: ssl.SSLContext, count: int) -> list[asyncio.StreamWriter]:
    """`count` connections to 127.0.0.1:`port`, each left at one of STALLS; those the server refused to
    open are not in the list (callers compare its length with `count`)."""
    gate = asyncio.Semaphore(64)

    async def one(i: int) -> asyncio.StreamWriter | None:
        async with gate:
            try:
                _, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=ctx, server_hostname="localhost"
                )
            except OSError:
                return None
            if STALLS[i % len(STALLS)]:
                writer.write(STALLS[i % len(STALLS)])
                await writer.drain()
            return writer

    opened = await asyncio.gather(*(one(i) for i in range(count)))
    return [w for w in opened if w is not None]


async def timed_request(port: int, ctx: ssl.SSLContext, method: str, path: str, body: bytes = b"") -> float:
    """Seconds for a new connection's request and whole answer (TLS handshake included); RuntimeError
    unless the answer is a 200."""
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
    head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    writer.write(f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    answer = await asyncio.wait_for(reader.read(), 10)
    elapsed = time.perf_counter() - start
    writer.close()
    if not answer.startswith(b"HTTP/1.1 200 "):
        raise RuntimeError(f"{path}: {answer[:200]!r}")
    return elapsed


def still_open(writers: list[asyncio.StreamWriter]) -> int:
    return sum(not w.transport.is_closing() and not w.is_closing() for w in writers)
