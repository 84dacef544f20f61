"""Units of `aliyun.com/gpu-mem`: GiB, MiB, or the device plugin's blocks of N MiB.

Every part must count gpu-mem in the same unit; this is the one place that says what a unit is.
"""

from __future__ import annotations

import re

# Also "<N>MiB": the device plugin's MiB mode counts blocks of N MiB (see webhook/core/node/devices.py).
_BLOCK_UNIT = re.compile(r"^[1-9][0-9]{0,5}MiB$")


def unit_mib(unit: object) -> int:
    """MiB in one unit of aliyun.com/gpu-mem: "GiB" 1024, "MiB" 1, "<N>MiB" N (the plugin's MiB blocks).

    Every part must count gpu-mem in the same unit; this is the one place that says what a unit is.
    """
    if unit == "GiB":
        return 1024
    if unit == "MiB":
        return 1
    if isinstance(unit, str) and _BLOCK_UNIT.match(unit):
        return int(unit[:-3])
    raise ValueError(f"memory unit {unit!r} is not GiB, MiB or <N>MiB (e.g. 128MiB)")


def memory_unit(text: str) -> str:
    """`text` when it names a memory unit (see `unit_mib`); ValueError otherwise. Usable as argparse type."""
    unit_mib(text)
    return text
