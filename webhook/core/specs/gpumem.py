"""GPU memory as a container asks for it: its values read once, and the problems and fixes the rules and the
demand share, in words, with the configured memory unit in them.

The webhook and `gpushare check` (through resourcerules.py) and the extender (through demand.py) report the
same text for the same mistake; this module holds that text once. How a finding is worded around it (the
field, the value shown) is core.specs.finding's.
"""

from __future__ import annotations

import functools
import re

from webhook.core.specs.finding import MAX_INT_BITS, Problem
from webhook.core.wire import quantity
from webhook.core.wire.units import unit_mib

DEFAULT_UNIT = "GiB"
# The least GPU memory a CUDA process needs for its context alone, in MiB: a process that allocated 256 MiB
# used 774-812 MiB of an H200 (docs/device-plugin.md), less on older GPUs. A share under it is allowed, with
# a warning (SMALL_SHARE_MIB by default; 0: no warning).
SMALL_SHARE_MIB = 512
_BYTES_PER_MIB = 1 << 20
# More GPU memory than any pod could ask (16 TiB): a count of units past it can only be bytes.
_MOST_MIB = 16 << 20
# A number followed by a byte-like suffix: "3Gi", "3G", "3072Mi", "1.5Ti". "E" alone is exa, "3E3" is not.
_BYTE_SUFFIX = re.compile(r"^[+-]?[0-9.]+(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)$")
_SHOWN_DIGITS = 20
# Spellings this long or shorter are remembered once read (as quantity.parse does).
CACHED_LENGTH = 32
# What a quantity may arrive as; a tuple, as `str | int | ...` in isinstance builds a union per call.
_JSON_SCALARS = (str, int, float, type(None))


def unit_plural(unit: str) -> str:
    """`GiB`, `MiB`, or `blocks of 128 MiB` for the device plugin's block unit."""
    return unit if unit in ("GiB", "MiB") else f"blocks of {unit_mib(unit)} MiB"


def unit_one(unit: str) -> str:
    """`GiB`, `MiB`, or `a block of 128 MiB`."""
    return unit if unit in ("GiB", "MiB") else f"a block of {unit_mib(unit)} MiB"


def _a(unit: str) -> str:
    return f"a {unit}" if unit in ("GiB", "MiB") else unit_one(unit)


def under_least(mib: int, least_mib: int) -> bool:
    """Whether a share of `mib` MiB is one, and too small to hold a CUDA context (`least_mib`)."""
    return 0 < mib < least_mib


def small_share(who: str, mib: int, least: str) -> str:
    """The warning for `who`'s share of `mib` MiB, under the least share (said as `least` in the unit the
    user writes)."""
    return f"{who}: {mib} MiB of GPU memory may not hold a CUDA context; ask at least {least}"


def least_units(least_mib: int, unit: str) -> str:
    """`least_mib` as a gpu-mem value to write: `512` (MiB), `4 (512 MiB)` in blocks, `1` (GiB)."""
    per = unit_mib(unit)
    units = -(-least_mib // per)
    return str(units) if unit == "MiB" or per >= least_mib else f"{units} ({units * per} MiB)"


def write(units: int, unit: str) -> str:
    """The fix every gpu-mem message ends with: `write 3; the unit is GiB`."""
    return f"write {units}; the unit is {unit_one(unit)}"


def invalid(reason: str, unit: str) -> Problem:
    """A value that is no quantity at all ("four", [], "")."""
    return Problem(
        f"is not a valid quantity: {reason}", f"write a whole number such as 4; the unit is {unit_one(unit)}"
    )


def negative(name: str, unit: str) -> Problem:
    return Problem(f"{name} cannot be negative", f"write 0 or more, e.g. 4; the unit is {unit_one(unit)}")


def parse(raw: object) -> quantity.Quantity | str:
    """The quantity, or apimachinery's reason for refusing it; never raises, whatever JSON `raw` is."""
    if type(raw) is str and len(raw) <= CACHED_LENGTH:
        return _parse_text(raw)  # most values: "1", "4", "16", read once per spelling
    if isinstance(raw, int) and raw.bit_length() > MAX_INT_BITS:
        return quantity.TOO_LARGE_ERROR
    if not isinstance(raw, _JSON_SCALARS):
        # from_json would repr() the value, which fails for lists holding huge ints.
        return quantity.FORMAT_ERROR
    try:
        return quantity.from_json(raw)
    except quantity.QuantityError as err:
        return err.reason


# Results are immutable (a Quantity, or the reason as a string): one spelling is read once.
@functools.lru_cache(maxsize=4096)
def _parse_text(raw: str) -> quantity.Quantity | str:
    try:
        return quantity.from_json(raw)
    except quantity.QuantityError as err:
        return err.reason


def read(raw: object) -> tuple[quantity.Quantity | str, bool]:
    """`parse(raw)`, and whether the value is plain: a whole number >= 0 written without a suffix, of
    which no rule has anything to say, whatever the resource and unit (memory_problem is None for it,
    and so are the whole-GPU rules). The walk (podspec) reads every GPU value through here once."""
    if type(raw) is str and len(raw) <= CACHED_LENGTH:
        return read_text(raw)
    parsed = parse(raw)
    return parsed, _plain(raw, parsed)


# One tuple per spelling: a limit and a request of the same spelling get the same parsed object.
@functools.lru_cache(maxsize=4096)
def read_text(raw: str) -> tuple[quantity.Quantity | str, bool]:
    """`read` of a spelling of at most 32 characters, remembered (the walk calls it directly)."""
    parsed = _parse_text(raw)
    return parsed, _plain(raw, parsed)


def _plain(raw: object, parsed: quantity.Quantity | str) -> bool:
    if isinstance(parsed, str) or parsed.is_negative() or not parsed.is_integer():
        return False
    # As memory_value reads a suffix: one the API server may have written is judged there, per unit.
    return not (isinstance(raw, str) and _BYTE_SUFFIX.match(raw.strip()))


def _ceil(value: quantity.Quantity, divisor: int = 1) -> int:
    # ceil(mantissa * 10**exponent / divisor), exactly; at least 1 so the fix never suggests 0.
    top, bottom = value.mantissa, divisor
    if value.exponent >= 0:
        top *= 10**value.exponent
    else:
        bottom *= 10**-value.exponent
    return max(1, -(-top // bottom))


def _number(value: quantity.Quantity) -> str:
    if not value.is_integer() or value.exponent > _SHOWN_DIGITS:
        return "a very large number of"
    whole = value.milli_value() // 1000
    return str(whole) if whole.bit_length() < 64 else "a very large number of"


def memory_value(raw: object, parsed: quantity.Quantity, name: str, unit: str) -> Problem | None:
    """What is wrong with a gpu-mem value that parsed as a non-negative quantity; None when it is fine.

    Denied: a byte suffix ("3Gi", "3G", "3072Mi": the extender would count 3221225472 units and the pod
    would stay Pending forever) and a fraction ("0.5": devices are whole units). A whole number in
    another spelling ("3e0", "3000m", or "4k", the API server's own spelling of 4000) is that number.
    """
    text = raw.strip() if isinstance(raw, str) else ""
    if _BYTE_SUFFIX.match(text) and not _written_by_the_api_server(text, parsed, unit):
        wanted = _ceil(parsed, unit_mib(unit) * _BYTES_PER_MIB)
        plural = unit_plural(unit)
        return Problem(
            f"is read as {_number(parsed)} {plural}: "
            f"{name} is a plain number of {plural}, with no unit suffix",
            write(wanted, unit),
        )
    if not parsed.is_integer():
        return Problem(
            f"{name} counts whole {unit_plural(unit)}; a fraction of {_a(unit)} is not possible",
            write(_ceil(parsed), unit),
        )
    return None


def _written_by_the_api_server(text: str, parsed: quantity.Quantity, unit: str) -> bool:
    """Whether a decimal suffix is how the API server writes a plain number: it keeps quantities in
    canonical form, so a manifest's `4000` reaches the webhook as "4k" and `16000000` as "16M". Taken
    as a byte size only when the number of units could be no request at all (over 16 TiB of GPU memory):
    "3G" in GiB is 3,000,000,000 GiB, surely meant as bytes; "4k" in MiB is 4000 MiB."""
    if text.endswith("i") or not parsed.is_integer():
        return False  # a binary suffix, or a fraction: the user's own spelling
    return parsed.milli_value() // 1000 * unit_mib(unit) <= _MOST_MIB


def memory_problem(raw: object, parsed: quantity.Quantity | str, name: str, unit: str) -> Problem | None:
    """Any problem of a gpu-mem value (`parsed` as `parse` gave it); None when it is a fine whole number."""
    if type(raw) is str and len(raw) <= CACHED_LENGTH:
        return _text_problem(raw, name, unit)  # the same few spellings in every pod
    return _memory_problem(raw, parsed, name, unit)


@functools.lru_cache(maxsize=4096)
def _text_problem(raw: str, name: str, unit: str) -> Problem | None:
    return _memory_problem(raw, _parse_text(raw), name, unit)


def _memory_problem(raw: object, parsed: quantity.Quantity | str, name: str, unit: str) -> Problem | None:
    if isinstance(parsed, str):
        return invalid(parsed, unit)
    if parsed.is_negative():
        return negative(name, unit)
    return memory_value(raw, parsed, name, unit)


def count_resource(count: str) -> Problem:
    """`aliyun.com/gpu-count` under resources: denied, as the pod label is what asks for several GPUs.

    Honouring it would change its meaning: the kube-scheduler would also subtract it from the node's
    `aliyun.com/gpu-count` capacity (the number of physical GPUs), so pods would use GPUs up by count.
    """
    return Problem(
        f"{count} is not a resource a container asks for; the number of GPUs to spread "
        f"the pod's GPU memory over is the pod label {count}",
        f'remove it from resources and set the pod label {count}: "2" (metadata.labels)',
    )


def whole_and_memory(whole: str, memory: str, unit: str) -> Problem:
    """Whole GPUs and a share of GPU memory in one container: denied.

    A node serves either whole GPUs or shares (its ack.node.gpu.schedule mode), and both device plugins
    set NVIDIA_VISIBLE_DEVICES, so such a container would stay Pending or see the wrong card.
    """
    return Problem(
        f"asks for whole GPUs ({whole}) and a share of GPU memory ({memory}) at once; "
        "a node serves one or the other",
        f"keep {whole} for whole GPUs, or {memory} ({unit_plural(unit)}) for a share of one GPU",
    )
