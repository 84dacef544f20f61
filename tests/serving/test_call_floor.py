"""bench/call_floor.py measures what one call costs our servers before any work (docs/extender.md,
"Speed"): it runs here briefly, so the script keeps working."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "call_floor.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], check=False, capture_output=True, text=True, timeout=120
    )


def _costs(done: subprocess.CompletedProcess[str], kinds: tuple[str, ...]) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    for kind in kinds:
        line = next(line for line in done.stdout.splitlines() if line.strip().startswith(kind))
        costs = [int(c) for c in re.findall(r"/s\s+(\d+) µs", line)]
        assert len(costs) == 2, line
        assert all(cost > 0 for cost in costs), line  # the server's own CPU, read from /proc


def test_every_server_answers_and_its_cost_per_call_is_measured():
    # /proc counts CPU in 10 ms ticks: enough calls that even the cheapest server spends several
    _costs(_run("--calls", "1500", "--rates", "1000,2000"), ("uvicorn", "granian", "bare"))


def test_plain_http_is_measured_for_the_servers_that_serve_it():
    # a bare server over plain HTTP spent under one tick on 500 calls (one CI-like run in several)
    done = _run("--calls", "3000", "--rates", "1000,2000", "--plain", "--servers", "uvicorn,bare")
    _costs(done, ("uvicorn", "bare"))
    assert "over HTTP," in done.stdout


def test_bad_arguments_are_refused_with_a_message():
    for args in (("--servers", "nginx"), ("--rates", "fast"), ("--rates", "0"), ("--calls", "0")):
        done = _run(*args)
        assert done.returncode == 2, args
        assert "--servers takes uvicorn, granian, bare" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    done = _run("--plain", "--servers", "granian")
    assert done.returncode == 2
    assert "granian serves HTTP/2 only over TLS" in done.stderr, done.stderr
