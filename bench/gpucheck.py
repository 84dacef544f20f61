"""What the GPU check scripts (bench/deviceplugin_gpu.py, dra_gpu.py, mps_gpu.py) share: a check that
prints and stops the run, the GPUs shown, and the run itself: NVML usable (unless a fake inventory is
named), a scratch folder, the exit status."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from webhook.core.node import devices
from webhook.gpus import inventory


class CheckFailed(Exception):
    pass


class NotHere(Exception):
    """What the check needs is not on this machine (exit 2, as without NVML)."""


def check(ok: object, what: str) -> None:
    print(f"  {'ok' if ok else 'FAILED'}: {what}")
    if not ok:
        raise CheckFailed(what)


def add_fake_gpus(parser: argparse.ArgumentParser, example: str) -> None:
    """--fake-gpus: a fake inventory (`example`) instead of NVML, for the checks that need no GPU. Checked
    by the inventory's own parser, so a malformed one is a usage error rather than the plugin's or
    driver's StartError; pass `fake=bool(args.fake_gpus)` to `main`."""

    def spec(text: str) -> str:
        if text:
            try:
                inventory.parse_fake_gpus(text)
            except inventory.InventoryError as err:
                raise argparse.ArgumentTypeError(str(err)) from None
        return text

    parser.add_argument(
        "--fake-gpus",
        type=spec,
        default="",
        help=f"a fake inventory (e.g. {example}) instead of NVML: the checks that need no GPU",
    )


def show_gpus(gpus: Sequence[devices.Gpu], source: str = "NVML") -> None:
    print(f"{len(gpus)} GPU(s) from {source}:")
    for g in gpus:
        capability = g.compute_capability or "?"
        print(f"  GPU {g.index}: {g.model}, {g.memory_mib} MiB, compute capability {capability}, {g.uuid}")


def nvml_missing() -> str:
    """Why NVML cannot be used here ("" when it can)."""
    try:
        import pynvml  # noqa: PLC0415  (only here: the module needs the driver's library)

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as err:  # no driver, no libnvidia-ml: nothing to check here
        return str(err) or type(err).__name__
    return ""


def main(
    name: str, args: argparse.Namespace, run: Callable[[argparse.Namespace, Path], str], *, fake: bool = False
) -> int:
    """`run(args, scratch folder)` and print its last line: 0, 1 on a failed check, 2 without NVML (unless
    `fake`: a fake inventory needs none) or without what the check needs (NotHere)."""
    if not fake and (why := nvml_missing()):
        print(f"{name}: NVML is not usable here ({why}); run it on a machine with NVIDIA GPUs")
        return 2
    with tempfile.TemporaryDirectory(prefix=name, dir="/tmp") as root:
        try:
            print(run(args, Path(root)))
        except CheckFailed:
            return 1
        except NotHere as err:
            print(f"{name}: {err}")
            return 2
    return 0
