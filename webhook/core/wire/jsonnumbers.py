"""How a JSON number reads, the same in the webhook, the extender and `gpushare check`.

    read_int("3") -> 3      read_int("18446744073709551616") -> 1.8446744073709552e+19
    read_int("9" * 5000) -> inf          refuse_constant("NaN") raises ValueError

Integers past the 64-bit range read as floats, as orjson (the webhook's decoder) reads them, and past the
double range as +-infinity: never Python's ValueError for more than 4,300 digits. A GPU field holding one
is then denied for its value like any other number; anywhere else it is ignored.
"""

from __future__ import annotations

from typing import NoReturn

_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
# Past 20 characters ("-9223372036854775808" is 20) no integer fits 64 bits: skip int() on long texts.
_MAX_INT64_CHARS = 20


def read_int(text: str) -> int | float:
    """A JSON integer literal (digits, optional sign) as a value; a `parse_int` for `json.loads`."""
    if len(text) <= _MAX_INT64_CHARS:
        number = int(text)
        if _INT64_MIN <= number <= _UINT64_MAX:
            return number
    return float(text)


def refuse_constant(name: str) -> NoReturn:
    """`parse_constant` for `json.loads`: NaN and Infinity are no JSON (Go never writes them)."""
    raise ValueError(f"{name} is not valid JSON")
