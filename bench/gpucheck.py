"""What bench/deviceplugin_gpu.py and bench/dra_gpu.py share: a check that prints and stops the run, and
the run itself: NVML usable (unless a fake inventory is named), a scratch folder, the exit status."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path


class CheckFailed(Exception):
    pass


def check(ok: object, what: str) -> None:
    print(f"  {'ok' if ok else 'FAILED'}: {what}")
    if not ok:
        raise CheckFailed(what)


def nvml_missing() -> str:
    """Why NVML cannot be used here ("" when it can)."""
    try:
        import pynvml  # noqa: PLC0415  (only here: the module needs the driver's library)

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as err:  # no driver, no libnvidia-ml: nothing to check here
        return str(err) or type(err).__name__
    return ""


def main(name: str, args: argparse.Namespace, run: Callable[[argparse.Namespace, Path], str]) -> int:
    """`run(args, scratch folder)` and print its last line: 0, 1 on a failed check, 2 without NVML."""
    if not args.fake_gpus and (why := nvml_missing()):
        print(f"{name}: NVML is not usable here ({why}); run it on a machine with NVIDIA GPUs")
        return 2
    with tempfile.TemporaryDirectory(prefix=name, dir="/tmp") as root:
        try:
            print(run(args, Path(root)))
        except CheckFailed:
            return 1
    return 0
