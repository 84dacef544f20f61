"""Check that the MPS env the device plugin and the DRA driver give a container (webhook/core/node/mps.py)
limits its GPU memory under a real MPS control daemon on this machine's first GPU.

It starts `nvidia-cuda-mps-control -d` with its own pipe and log folders, then runs a CUDA child
(bench/nvml_usage_probe.py's, through libcuda) with the env of a container holding a 2 GiB share: one that
allocates 1 GiB must run, one that allocates 3 GiB must be refused by MPS, and get it without the limit;
a client given 10% of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) must write memory slower than one given
100%. Stops the daemon. Exits 1 when a check fails, 2 when there is no GPU or no MPS daemon.

    .venv/bin/python bench/mps_gpu.py [--share-gib 2]
"""

# ruff: noqa: E501  (report lines are kept whole)
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpucheck
from gpucheck import check

from webhook.core.node import devices, mps

PROBE = Path(__file__).with_name("nvml_usage_probe.py")
DAEMON = "nvidia-cuda-mps-control"


def _daemon() -> str | None:
    return shutil.which(DAEMON) or next(
        (str(p) for p in (Path("/usr/local/nvidia/bin") / DAEMON, Path("/usr/bin") / DAEMON) if p.exists()),
        None,
    )


def _child(env: dict[str, str], mib: int, seconds: int = 1) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(PROBE), "--child", "--allocate", str(mib), "--seconds", str(seconds)]
    return subprocess.run(
        command, env={**os.environ, **env}, check=False, capture_output=True, text=True, timeout=120
    )


def _rate(done: subprocess.CompletedProcess[str]) -> float:
    found = re.search(r"memset ([0-9.]+) GB/s", done.stdout)
    return float(found.group(1)) if found and done.returncode == 0 else 0.0


def run(args: argparse.Namespace, root: Path) -> str:
    daemon = _daemon()
    if daemon is None:
        raise gpucheck.NotHere(f"no {DAEMON} here: nothing checked")
    dirs = mps.MpsDirs(str(root / "pipe"), str(root / "log"))
    for folder in (dirs.pipe, dirs.log):
        Path(folder).mkdir()
    daemon_env = {**os.environ, mps.ENV_PIPE_DIRECTORY: dirs.pipe, mps.ENV_LOG_DIRECTORY: dirs.log}
    started = subprocess.run(
        [daemon, "-d"], env=daemon_env, check=False, capture_output=True, text=True, timeout=30
    )
    check(started.returncode == 0, f"{DAEMON} -d started ({started.stderr.strip() or 'no error'})")
    try:
        env = mps.container_env({0: args.share_gib}, devices.Granularity.parse("GiB"), None, dirs)
        print(f"  a {args.share_gib} GiB share's env: {env}")
        inside = _child(env, (args.share_gib - 1) * 1024)
        print(
            f"  {(args.share_gib - 1) * 1024} MiB: rc {inside.returncode} {(inside.stdout + inside.stderr).strip()[:300]}"
        )
        check(inside.returncode == 0, f"a client allocating {args.share_gib - 1} GiB runs under MPS")
        beyond = _child(env, (args.share_gib + 1) * 1024)
        print(
            f"  {(args.share_gib + 1) * 1024} MiB: rc {beyond.returncode} {(beyond.stdout + beyond.stderr).strip()[:300]}"
        )
        check(
            beyond.returncode != 0 and "cuMemAlloc" in beyond.stderr,
            f"a client allocating {args.share_gib + 1} GiB is refused its memory",
        )
        unlimited = {k: v for k, v in env.items() if k != mps.ENV_MEM_LIMIT}
        control = _child(unlimited, (args.share_gib + 1) * 1024)
        check(
            control.returncode == 0,
            f"and the same client without {mps.ENV_MEM_LIMIT} gets it: the limit refused it",
        )
        rates = {
            percent: _rate(_child({**env, mps.ENV_THREAD_PERCENTAGE: str(percent)}, 1024, 3))
            for percent in (100, 10)
        }
        print(f"  memset by CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: {rates} GB/s")
        check(
            0 < rates[10] < 0.7 * rates[100],
            "a client given 10% of the SMs writes memory slower than one given 100%",
        )
        log = Path(dirs.log) / "control.log"
        print(f"  control.log: {log.read_text()[-600:] if log.exists() else '(none)'}")
    finally:
        subprocess.run(
            [daemon], input="quit\n", env=daemon_env, check=False, capture_output=True, text=True, timeout=30
        )
        time.sleep(1.0)
    return "OK: MPS held a container to its share"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--share-gib", type=int, default=2, help="the share's size (GiB, at least 2)")
    args = parser.parse_args()
    if args.share_gib < 2:
        parser.error("--share-gib: at least 2")
    return gpucheck.main("mps_gpu", args, run)


if __name__ == "__main__":
    sys.exit(main())
