"""Run the device plugin's real NVML usage path on this machine's GPUs and print what it saw.

It starts a child process that creates a CUDA context through the driver's libcuda (ctypes, no CUDA
toolkit needed), allocates `--allocate` MiB on each GPU and keeps it busy with memsets; then it samples
with `webhook.gpus.usage.nvml.NvmlUsage` (nvmlDeviceGetComputeRunningProcesses, the MPS list, and
per-process utilisation from nvmlDeviceGetProcessesUtilizationInfo or nvmlDeviceGetProcessUtilization),
reads each process's cgroup with `webhook.gpus.cgroupreader` under `--proc-root`, and prints, per GPU:
used memory and utilisation, each process with its memory, SM utilisation and pod/container (or "not in
a pod"), which utilisation call answered, and the CPU time of one poll. It checks that the child's PID
is listed with at least the memory it allocated, and exits 1 when it is not.

    .venv/bin/python bench/nvml_usage_probe.py [--allocate 256] [--seconds 6] [--proc-root /proc]

Needs nvidia-ml-py and PyYAML (the repository's .venv has both) and an NVIDIA driver.
"""

# ruff: noqa: E501  (report lines are kept whole)
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpucheck import show_gpus

from webhook.gpus.cgroupreader import CgroupReader
from webhook.gpus.inventory import NvmlInventory
from webhook.gpus.usage.nvml import NvmlUsage

MIB = 1 << 20


def child(allocate_mib: int, seconds: float) -> int:
    """Hold `allocate_mib` on every GPU and keep them busy for `seconds` (CUDA driver API only)."""
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(result: int, what: str) -> None:
        if result != 0:
            raise SystemExit(f"probe child: {what} failed with CUDA error {result}")

    check(cuda.cuInit(0), "cuInit")
    count = ctypes.c_int()
    check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    held = []
    for ordinal in range(count.value):
        device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
        check(cuda.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
        check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
        check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(allocate_mib * MIB)), "cuMemAlloc")
        held.append((context, pointer))
    print(f"probe child {os.getpid()}: holding {allocate_mib} MiB on {count.value} GPU(s)", flush=True)
    started = time.monotonic()
    deadline, rounds = started + seconds, 0
    while time.monotonic() < deadline:
        for context, pointer in held:  # memset kernels: SM time the per-process samples can show
            check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
            check(cuda.cuMemsetD8_v2(pointer, 0x5A, ctypes.c_size_t(allocate_mib * MIB)), "cuMemsetD8")
        check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
        rounds += 1
    # What the memsets wrote per second: bench/mps_gpu.py compares it under an MPS thread percentage.
    rate = rounds * len(held) * allocate_mib * MIB / (time.monotonic() - started) / 1e9
    print(f"probe child {os.getpid()}: memset {rate:.1f} GB/s", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--allocate", type=int, default=256, metavar="MIB", help="MiB the child holds per GPU (0: no child)"
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="how long the child keeps its memory")
    parser.add_argument("--proc-root", type=Path, default=Path("/proc"), help="the host's /proc")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.allocate, args.seconds)

    import pynvml  # noqa: PLC0415  (only here: the module needs the driver's library)

    try:
        inventory = NvmlInventory()
    except Exception as err:  # no driver, no libnvidia-ml: nothing to probe here
        print(f"nvml_usage_probe: NVML is not usable here ({err}); run it on a machine with NVIDIA GPUs")
        return 2
    gpus = inventory.gpus()
    show_gpus(gpus, f"NVML, driver {_text(pynvml.nvmlSystemGetDriverVersion())}")
    source = NvmlUsage(pynvml, gpus)
    before = {p.pid for s in source.sample() for p in s.processes}
    process = None
    if args.allocate:
        command = [
            sys.executable,
            __file__,
            "--child",
            "--allocate",
            str(args.allocate),
            "--seconds",
            str(args.seconds),
        ]
        process = subprocess.Popen(command)
        time.sleep(min(3.0, args.seconds / 2))  # context creation and the first samples
    try:
        source.sample()  # samples since the baseline; the next one covers the last second
        time.sleep(1.0)
        started = time.thread_time()
        samples = source.sample()
        poll_cpu = time.thread_time() - started
        origins = CgroupReader(args.proc_root).origins({p.pid for s in samples for p in s.processes})
    finally:
        if process is not None:
            process.wait(timeout=args.seconds + 30)
        inventory.close()
    # NVML reports host PIDs: in a PID namespace the child's own PID differs, so a new process holding
    # at least what the child allocated counts as the child too.
    children = {
        p.pid
        for s in samples
        for p in s.processes
        if process is not None
        and (p.pid == process.pid or (p.pid not in before and (p.memory_bytes or 0) >= args.allocate * MIB))
    }
    for s in samples:
        used = f"{s.memory_used_bytes / MIB:.0f} MiB" if s.memory_used_bytes is not None else "unknown"
        util = f"{s.utilization:.0%}" if s.utilization is not None else "unknown"
        api = source.utilization_call(s.index) if s.process_utilization else None
        print(
            f"GPU {s.index}: used {used}, busy {util}, per-process utilisation from {api or 'nowhere (not offered)'}"
        )
        for p in s.processes:
            memory = f"{p.memory_bytes / MIB:.0f} MiB" if p.memory_bytes is not None else "unknown"
            sm = f"{p.utilization:.0%}" if p.utilization is not None else "n/a"
            origin = origins.get(p.pid, "cgroup unreadable")
            where = "not in a pod" if origin is None else origin
            mine = (
                f" (the probe's child, its PID here {process.pid})" if p.pid in children and process else ""
            )
            print(f"  pid {p.pid}{mine}: {memory}, SM {sm}, {where}")
    print(f"one poll of {len(samples)} GPU(s): {poll_cpu * 1000:.2f} ms CPU")
    if process is not None and not children:
        print(f"FAIL: the child {process.pid} was not listed with >= {args.allocate} MiB")
        return 1
    print("OK: the child was listed with its memory" if process is not None else "OK")
    return 0


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


if __name__ == "__main__":
    sys.exit(main())
