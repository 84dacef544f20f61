"""bench/dra_gpu.py is what a session with a GPU runs for the DRA driver (docs/dra.md): its checks run
here on fake inventories, so the script still works the day a GPU is at hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "dra_gpu.py"


def _run(gpus: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--fake-gpus", gpus],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_gpu_check_passes_on_volta_or_newer():
    done = _run("0:16:NVIDIA-A100:8.0,1:24:NVIDIA-A100:8.0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: the spec names the GPU by its real UUID" in done.stdout
    assert "ok: and the MPS memory limit of the share" in done.stdout
    assert done.stdout.rstrip().endswith("OK: the DRA driver served this machine's GPUs")


def test_the_gpu_check_expects_nothing_published_on_older_gpus():
    done = _run("0:16:Tesla P100:6.0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("OK: the DRA driver refused MPS on these GPUs, as it must")
