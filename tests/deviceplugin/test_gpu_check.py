"""bench/deviceplugin_gpu.py is what a session with a GPU runs (docs/device-plugin.md, "On a GPU"): its
checks run here on a fake inventory, so the script still works the day a GPU is at hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "deviceplugin_gpu.py"


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args], check=False, capture_output=True, text=True, timeout=120
    )


def test_the_gpu_check_passes_on_a_fake_inventory():
    done = _run(SCRIPT, "--fake-gpus", "0:16,1:24")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: the kubelet was sent 40 healthy devices (one per GiB)" in done.stdout
    assert "ok: and 2 whole cards (nvidia.com/gpu)" in done.stdout
    assert "ok: Allocate gave GPU 0's UUID in NVIDIA_VISIBLE_DEVICES" in done.stdout
    assert done.stdout.rstrip().endswith("OK: the plugin served this machine's GPUs")


def test_the_mps_check_loads():
    # It needs a GPU and an MPS daemon (docs/modes.md); here: that it imports and parses its flags.
    done = _run(SCRIPT.with_name("mps_gpu.py"), "--help")
    assert done.returncode == 0 and "--share-gib" in done.stdout, done.stderr


def test_a_malformed_fake_inventory_is_a_usage_error():
    # The inventory's own parser judges it, and says why in one line: not the plugin's StartError.
    for script in (SCRIPT, SCRIPT.with_name("dra_gpu.py")):
        done = _run(script, "--fake-gpus", "0:x")
        assert done.returncode == 2, done.stdout + done.stderr
        assert "memory 'x' must be a positive whole number of GiB" in done.stderr
        assert "Traceback" not in done.stderr
