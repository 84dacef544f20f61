"""Never pinned: the webhook with 2,000 stalled TLS connections open, measured from outside.

    .venv/bin/python bench/admission_stalled.py [--connections 2000]

Starts the webhook (production app and logging, the default `ServeOptions` except, in phase A, read
deadlines long enough that every stalled connection is still held while measuring) and opens the
connections over TLS: half send nothing after the handshake, a quarter half a request line and headers,
a quarter full headers and half the body. Then it prints the server's RSS beside the chart's 256 MiB limit,
the latency of new /healthz and /validate requests, and how long SIGTERM takes to stop the server. Phase B
repeats with the default deadlines and reports how long the server takes to close them all. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from admission_review import realistic_review

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.admission.stalling import CHART_LIMIT_MIB, open_stalled, rss_mib, still_open, timed_request
from webhook.admission import app as admission_app
from webhook.admission import settings as admission_settings
from webhook.serving import logs, probes, protocol, server, tls


def serve(cert_dir: Path, held_s: float) -> None:
    """Server process: print the port, serve until SIGTERM."""
    logs.configure("info", "json")
    readiness = probes.Readiness()
    cfg = admission_settings.build(overrides={"host": "127.0.0.1", "port": 0})
    limits = protocol.Limits()
    if held_s > 0:
        limits = protocol.Limits(header_timeout_s=held_s, body_timeout_s=held_s)
    options = server.ServeOptions(host="127.0.0.1", port=0, tls=tls.TlsFiles.in_dir(cert_dir), limits=limits)
    srv = server.AppServer(admission_app.create_app(cfg, readiness), options, readiness)
    print(srv.port, flush=True)
    srv.run()


async def probe(port: int, ctx: ssl.SSLContext) -> dict[str, float]:
    body = json.dumps(realistic_review()).encode()
    healthz = [await timed_request(port, ctx, "GET", "/healthz", b"") for _ in range(5)]
    reviews = [await timed_request(port, ctx, "POST", "/validate", body) for _ in range(5)]
    return {"healthz_max_ms": max(healthz) * 1000, "validate_max_ms": max(reviews) * 1000}


async def phase(cert_dir: Path, count: int, held_s: float) -> dict[str, float]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(cert_dir), str(held_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    ctx = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    out: dict[str, float] = {"rss_idle_mib": rss_mib(proc.pid)}
    start = time.monotonic()
    writers = await open_stalled(port, ctx, count)
    out["open_s"] = time.monotonic() - start
    out["opened"] = len(writers)
    await asyncio.sleep(0.5)
    out["rss_mib"] = rss_mib(proc.pid)
    out.update(await probe(port, ctx))
    out["held"] = still_open(writers)
    if held_s <= 0:  # default deadlines: how long until the server has dropped them all
        while still_open(writers) and time.monotonic() - start < 60:
            await asyncio.sleep(0.1)
        out["all_closed_after_s"] = time.monotonic() - start
        out["rss_after_mib"] = rss_mib(proc.pid)
    stop = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    await asyncio.get_running_loop().run_in_executor(None, proc.wait, 30)
    out["sigterm_s"] = time.monotonic() - stop
    out["exit_code"] = proc.returncode
    proc.stdout.close()
    for w in writers:
        w.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(Path(args.serve[0]), float(args.serve[1]))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = tls.write_cert_dir(Path(tmp), datetime.now(UTC)).path
        held = asyncio.run(phase(cert_dir, args.connections, held_s=120))
        default = asyncio.run(phase(cert_dir, args.connections, held_s=0))
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {os.cpu_count()} cpus; {args.connections} stalled TLS connections")
    for name, result in (("A: all held (deadlines 120 s)", held), ("B: default deadlines", default)):
        print(f"\n{name}")
        for key, value in result.items():
            print(f"  {key:<20} {value:>10.1f}")
    ok = (
        held["rss_mib"] < CHART_LIMIT_MIB
        and held["healthz_max_ms"] < 1000
        and held["validate_max_ms"] < 1000
        and held["sigterm_s"] <= 2
        and default["sigterm_s"] <= 2
    )
    goal = f"RSS < {CHART_LIMIT_MIB} MiB, /healthz and /validate < 1 s, SIGTERM <= 2 s"
    print(f"\n{goal}: {'OK' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
