"""The admission bench's load generator when `wrk` is installed: one wrk thread, pinned to a core of
its own, posting the review over keep-alive HTTPS connections; JSON results from a Lua `done` hook.

    run(port, "/validate", body, connections=16, seconds=4, cpu=1) -> {"rps": ..., "p50_ms": ..., ...}

wrk is written in C: unlike the Python client it leaves the server the CPU it needs, so the server's
req/s is what its own CPU allows (issue 21). Answers other than 2xx count as errors and fail the run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, */*"
wrk.headers["User-Agent"] = "kube-apiserver-admission"
local f = assert(io.open("%(body)s", "rb"))
wrk.body = f:read("*a")
f:close()

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\\nRESULT {"requests": %%d, "duration_us": %%d, "p50_us": %%d, "p99_us": %%d, '
    .. '"errors": %%d, "status_errors": %%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
"""


def available() -> bool:
    return shutil.which("wrk") is not None


def pinned(command: list[str], cpu: int | None) -> list[str]:
    """`command` run on core `cpu` alone (taskset), or as it is when there is no core to pin to (also
    how bench/admission.py pins its servers and its Python client)."""
    if cpu is None or shutil.which("taskset") is None:
        return command
    return ["taskset", "-c", str(cpu), *command]


def run(
    port: int, path: str, body: bytes, *, connections: int, seconds: float, cpu: int | None
) -> dict[str, float]:
    """One wrk run against https://127.0.0.1:port/path; `cpu` pins wrk to that core (None: anywhere)."""
    with tempfile.TemporaryDirectory() as tmp:
        body_file = Path(tmp) / "review.json"
        body_file.write_bytes(body)
        script = Path(tmp) / "post.lua"
        script.write_text(_SCRIPT % {"body": body_file})

        def once(secs: float) -> dict[str, Any]:
            out = subprocess.run(
                pinned(
                    [
                        "wrk",
                        "-t1",
                        f"-c{connections}",
                        f"-d{max(1, round(secs))}s",
                        "--timeout=5s",
                        "-s",
                        str(script),
                        f"https://127.0.0.1:{port}{path}?timeout=10s",
                    ],
                    cpu,
                ),
                check=True,
                capture_output=True,
                text=True,
                timeout=secs + 60,
            )
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise RuntimeError(f"wrk printed no result: {out.stdout[-500:]} {out.stderr[-500:]}")
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            if result["errors"] or result["status_errors"]:
                raise RuntimeError(f"wrk saw failed requests: {result}")
            return result

        warm = once(1)
        result = once(seconds)
    return {
        "rps": result["requests"] / (result["duration_us"] / 1e6),
        "p50_ms": result["p50_us"] / 1000,
        "p99_ms": result["p99_us"] / 1000,
        "requests": result["requests"],
        "all_requests": result["requests"] + warm["requests"],
        "body_bytes": len(body),
    }
