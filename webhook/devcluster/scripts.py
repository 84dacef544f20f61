"""The repository's build scripts as the test bed runs them: each prints what it made (a folder, a chart's
oci:// reference) as its last line, and says why on stderr when it fails.

    last_line("registry-bins")  -> Path-like text of the built registry's folder
"""

from __future__ import annotations

import subprocess

from webhook.devcluster import helm


def last_line(script: str, *args: str, timeout: float = 1800) -> str:
    """`bash scripts/<script> args...`; the last line it printed. RuntimeError with its exit code and the
    end of its stderr (and stdout) when it fails."""
    done = subprocess.run(
        ["bash", str(helm.ROOT / "scripts" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"scripts/{script} failed (exit {done.returncode}):\n{done.stderr[-3000:]}{done.stdout[-500:]}"
        )
    return lines[-1]
