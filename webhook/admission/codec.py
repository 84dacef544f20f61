"""JSON bytes <-> Python values for reviews, with orjson (~10x the stdlib's speed on a 4 KB review).

    decode(b'{"a": 1}') -> {"a": 1}         DecodeError("...") for anything that is not strict JSON
    encode({"a": 1})   -> b'{"a":1}'

Strict: NaN/Infinity literals, invalid UTF-8 and lone surrogates are errors (the API server, written in
Go, never sends them). Numbers beyond the 64-bit range are not: orjson reads them as floats, and one past
the double range (or 4,300 digits, the stdlib's int limit) reads as +-infinity, so a review that holds one
still gets an answer; a GPU field holding it is then denied for its type like any other number.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from webhook.core import jsonnumbers


class DecodeError(ValueError):
    """The body is not strict JSON; the message says where, e.g. `unexpected character: line 1 ...`."""


def decode(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "number" not in str(exc):  # orjson's only refusal of valid JSON: a number out of range
            raise DecodeError(_first_line(exc)) from None
    return _decode_wide_numbers(body)


def _decode_wide_numbers(body: bytes) -> Any:
    """The stdlib reads what orjson refuses for range alone; the result is held to orjson's rules."""
    try:
        value = json.loads(body, parse_int=jsonnumbers.read_int, parse_constant=jsonnumbers.refuse_constant)
        orjson.dumps(value)  # lone surrogates: the one thing the stdlib lets through and orjson does not
    except (ValueError, RecursionError, orjson.JSONEncodeError) as exc:
        raise DecodeError(_first_line(exc)) from None
    return value


def encode(value: Any) -> bytes:
    return orjson.dumps(value)


def _first_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
